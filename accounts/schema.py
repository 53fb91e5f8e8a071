"""How the OpenAPI schema describes token authentication (drf-spectacular extension)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class TokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.tokens.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "An API token (the /account/tokens/ page, POST /api/tokens/ or "
                               "`manage.py create_token`), sent as `Token <key>`."}
