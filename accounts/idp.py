"""The one module that talks to the organisation's identity provider (OpenID Connect).

mozilla-django-oidc does the protocol: the authorization request with state, nonce and PKCE
(S256), the code exchange, the JWKS lookup and the signature check. What it leaves out, this
module adds: discovery from ``<issuer>/.well-known/openid-configuration``, the checks of the
ID token's issuer, audience and required claims (the library skips the audience and never
looks at the issuer), the userinfo ``sub`` check the spec requires, and turning every failure
(requests', PyJWT's, the library's SuspiciousOperation) into ``IdpError``, whose ``kind`` the
sign-in pages explain."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import SuspiciousOperation
from django.urls import reverse
from django.views import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import absolutify
from mozilla_django_oidc.views import OIDCAuthenticationRequestView

from .sso_config import SsoConfig

CALLBACK_URL_NAME = "accounts:sso-callback"  # <base URL>/auth/oidc/callback/, registered with the provider
DISCOVERY_CACHE_SECONDS = 300
# Seconds of clock difference between us and the provider tolerated on exp, iat and nbf.
CLOCK_LEEWAY = 60
# Asymmetric algorithms only: with HS256 the "signature" is made with our own client secret.
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class IdpError(Exception):
    """A sign-in that cannot go on. ``kind`` is one of:

    unreachable    the provider did not answer (down, DNS, TLS, timeout)
    misconfigured  it answered, but not as the settings say it should (issuer, endpoints)
    client         it refused our client credentials (wrong OIDC_CLIENT_SECRET, unknown client)
    code           it refused the authorization code (used already, expired, PKCE mismatch)
    token          the ID token failed a check (signature, issuer, audience, expiry, nonce)
    denied         it answered the sign-in with an error (the person cancelled, no access)
    """

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(message)


@dataclass(frozen=True)
class Provider:
    """What discovery says about the provider: the endpoints we use."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str
    end_session_endpoint: str
    algorithms: tuple[str, ...]


def discover(config: SsoConfig) -> Provider:
    """The provider's metadata, fetched from its discovery document and remembered for a few
    minutes (every sign-in needs it; a provider's endpoints rarely change)."""
    key = f"sso:discovery:{config.issuer}"
    found = cache.get(key)
    if found is not None:
        return found
    url = config.issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=config.timeout, verify=settings.OIDC_VERIFY_SSL)
        response.raise_for_status()
        document = response.json()
    except requests.HTTPError as exc:
        raise IdpError("misconfigured", f"{url} answered HTTP {exc.response.status_code}: is OIDC_ISSUER_URL "
                                        f"the issuer's URL?") from None
    except requests.RequestException as exc:
        raise IdpError("unreachable", f"the identity provider at {config.issuer} cannot be reached "
                                      f"({type(exc).__name__})") from None
    except ValueError:
        raise IdpError("misconfigured", f"{url} did not answer a JSON discovery document") from None
    if not isinstance(document, dict):
        raise IdpError("misconfigured", f"{url} did not answer a JSON discovery document")
    # OpenID Connect Discovery 1.0, 4.3: the issuer in the document must be the one we asked.
    if str(document.get("issuer", "")).rstrip("/") != config.issuer.rstrip("/"):
        raise IdpError("misconfigured", f"{url} names the issuer {document.get('issuer')!r}, not OIDC_ISSUER_URL "
                                        f"{config.issuer!r}")
    missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(k)]
    if missing:
        raise IdpError("misconfigured", f"{url} lacks {', '.join(missing)}")
    offered = document.get("id_token_signing_alg_values_supported") or ["RS256"]
    provider = Provider(
        issuer=document["issuer"], authorization_endpoint=document["authorization_endpoint"],
        token_endpoint=document["token_endpoint"], jwks_uri=document["jwks_uri"],
        userinfo_endpoint=document.get("userinfo_endpoint") or "",
        end_session_endpoint=document.get("end_session_endpoint") or "",
        algorithms=tuple(a for a in offered if a in SIGNING_ALGORITHMS) or ("RS256",),
    )
    cache.set(key, provider, DISCOVERY_CACHE_SECONDS)
    return provider


class Client(OIDCAuthenticationBackend):
    """mozilla-django-oidc's protocol code, configured from discovery rather than settings. Not
    an authentication backend of the project: the callback (accounts/sso_views.py) calls
    ``exchange`` directly and signs the person in with the project's own session backend."""

    def __init__(self, config: SsoConfig, provider: Provider):
        # The library's __init__ reads static endpoints from settings; ours come from discovery.
        self.config = config
        self.provider = provider
        self.OIDC_OP_TOKEN_ENDPOINT = provider.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = provider.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = provider.jwks_uri
        self.OIDC_RP_CLIENT_ID = config.client_id
        self.OIDC_RP_CLIENT_SECRET = config.client_secret
        self.OIDC_RP_SIGN_ALGO = provider.algorithms[0]
        self.OIDC_RP_IDP_SIGN_KEY = None

    def exchange(self, request, *, nonce: str, code_verifier: str | None) -> tuple[dict, str]:
        """Trade the callback's code for tokens, verify the ID token and return (claims, raw
        ID token): the ID token's claims, completed by userinfo's."""
        self.request = request
        payload = {
            "client_id": self.config.client_id, "client_secret": self.config.client_secret,
            "grant_type": "authorization_code", "code": request.GET.get("code", ""),
            "redirect_uri": absolutify(request, reverse(CALLBACK_URL_NAME)),
        }
        if code_verifier is not None:
            payload["code_verifier"] = code_verifier
        try:
            tokens = self.get_token(payload)
        except requests.HTTPError as exc:
            raise _token_endpoint_error(exc.response) from None
        except requests.RequestException as exc:
            raise IdpError("unreachable", f"the identity provider's token endpoint cannot be reached "
                                          f"({type(exc).__name__})") from None
        except ValueError:
            raise IdpError("misconfigured", "the token endpoint did not answer JSON") from None
        id_token = tokens.get("id_token") if isinstance(tokens, dict) else None
        if not isinstance(id_token, str) or not id_token:
            raise IdpError("token", "the identity provider sent no ID token (is the openid scope granted?)")
        try:
            claims = self.verify_token(id_token, nonce=nonce)
            userinfo = self.get_userinfo(tokens.get("access_token"), id_token, claims)
        except SuspiciousOperation as exc:
            raise IdpError("token", f"the ID token was refused: {exc}") from None
        except requests.HTTPError as exc:
            raise IdpError("misconfigured", f"{exc.response.url} answered HTTP {exc.response.status_code}") from None
        except requests.RequestException as exc:
            raise IdpError("unreachable", f"the identity provider stopped answering ({type(exc).__name__})") from None
        except ValueError:
            raise IdpError("misconfigured", "the provider's keys or userinfo were not JSON") from None
        return {**userinfo, **claims}, id_token

    def _verify_jws(self, payload, key):
        """The signature, with the issuer, audience, expiry and required claims: OpenID Connect
        Core 3.1.3.7. ``aud`` may list other clients only if ``azp`` names us."""
        try:
            claims = jwt.decode(
                payload, key, algorithms=list(self.provider.algorithms), audience=self.config.client_id,
                issuer=self.provider.issuer, leeway=CLOCK_LEEWAY,
                options={"require": ["iss", "sub", "aud", "exp", "iat"]},
            )
        except jwt.ExpiredSignatureError:
            raise SuspiciousOperation("it has expired (check the clocks of this server and the provider)") from None
        except jwt.InvalidAudienceError:
            raise SuspiciousOperation(f"it was issued to another client, not {self.config.client_id!r}") from None
        except jwt.InvalidIssuerError:
            raise SuspiciousOperation(f"it was issued by another issuer, not {self.provider.issuer!r}") from None
        except jwt.InvalidSignatureError:
            raise SuspiciousOperation("its signature does not verify with the provider's keys") from None
        except jwt.InvalidAlgorithmError:
            raise SuspiciousOperation("it is signed with an algorithm the provider does not offer") from None
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation(f"it is not a valid token ({exc})") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.config.client_id:
            raise SuspiciousOperation("it names several audiences and another authorized party")
        return claims

    def retrieve_matching_jwk(self, token):
        try:
            return super().retrieve_matching_jwk(token)
        except (jwt.PyJWTError, KeyError, ValueError) as exc:
            raise SuspiciousOperation(f"no key of the provider matches it ({type(exc).__name__})") from None

    def get_userinfo(self, access_token, id_token, payload):
        """Userinfo's claims, when the provider has the endpoint; they must be about the same
        subject as the ID token (Core 5.3.2), or they are not used at all."""
        if not self.provider.userinfo_endpoint or not access_token:
            return {}
        info = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(info, dict) or info.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the userinfo endpoint answered for another subject")
        return info

    def get_settings(self, attr, *args):
        # The library asks for a few knobs (timeouts, TLS); ours come from SsoConfig and settings.
        known = {"OIDC_TIMEOUT": self.config.timeout, "OIDC_VERIFY_SSL": settings.OIDC_VERIFY_SSL,
                 "OIDC_TOKEN_USE_BASIC_AUTH": True, "OIDC_USE_NONCE": True, "OIDC_VERIFY_KID": True,
                 "OIDC_PROXY": None, "OIDC_ALLOW_UNSECURED_JWT": False}
        if attr in known:
            return known[attr]
        return OIDCAuthenticationBackend.get_settings(attr, *args)


class _AuthorizationRequest(OIDCAuthenticationRequestView):
    """The library's authorization request (state, nonce, PKCE S256, the safe ``next``), to
    the endpoint discovery found."""

    def __init__(self, *, config, provider):
        View.__init__(self)  # the library's own __init__ reads static endpoints from settings
        self.config = config
        self.OIDC_OP_AUTH_ENDPOINT = provider.authorization_endpoint
        self.OIDC_RP_CLIENT_ID = config.client_id

    def get_settings(self, attr, *args):
        fixed = {"OIDC_RP_SCOPES": self.config.scopes, "OIDC_USE_PKCE": True, "OIDC_USE_NONCE": True,
                 "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
                 "OIDC_AUTHENTICATION_CALLBACK_URL": CALLBACK_URL_NAME}
        return fixed[attr] if attr in fixed else OIDCAuthenticationRequestView.get_settings(attr, *args)


def authorization_redirect(request, *, config: SsoConfig, provider: Provider):
    """Leg one of the code flow: the redirect to the provider, its state, nonce and PKCE
    verifier kept in the session for the callback."""
    view = _AuthorizationRequest(config=config, provider=provider)
    view.setup(request)
    return view.get(request)


def _token_endpoint_error(response) -> IdpError:
    """The token endpoint's refusal (RFC 6749 5.2), said in words an administrator can act on."""
    try:
        body = response.json()
        code = str(body.get("error", "")) if isinstance(body, dict) else ""
        detail = str(body.get("error_description", "")) if isinstance(body, dict) else ""
    except ValueError:
        code, detail = "", ""
    if code == "invalid_client" or response.status_code == 401:
        return IdpError("client", f"the identity provider refused this control plane's client credentials "
                                  f"({code or response.status_code}{': ' + detail if detail else ''}): check "
                                  f"OIDC_CLIENT_ID and OIDC_CLIENT_SECRET")
    if code == "invalid_grant":
        return IdpError("code", f"the identity provider refused the sign-in code ({detail or code}): it was used "
                                f"already or has expired")
    return IdpError("misconfigured", f"the token endpoint answered HTTP {response.status_code}"
                                     f"{' ' + code if code else ''}{': ' + detail if detail else ''}")


def logout_url(provider: Provider, *, id_token: str, client_id: str, post_logout_redirect_uri: str) -> str:
    """RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0): where to send the browser
    so the provider ends its session too; empty when the provider offers no such endpoint."""
    if not provider.end_session_endpoint:
        return ""
    params = {"client_id": client_id, "post_logout_redirect_uri": post_logout_redirect_uri}
    if id_token:
        params["id_token_hint"] = id_token
    separator = "&" if "?" in provider.end_session_endpoint else "?"
    return provider.end_session_endpoint + separator + urlencode(params)
