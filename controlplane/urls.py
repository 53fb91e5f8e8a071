from django.contrib import admin
from django.http import JsonResponse
from django.templatetags.static import static
from django.urls import include, path
from django.views import defaults
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny

from accounts import sso_views
from controlplane.unavailable import error_handler
from graphs.views import home


def healthz(request):
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", home, name="home"),
    path("login/", sso_views.SignInView.as_view(), name="login"),
    path("logout/", sso_views.sign_out, name="logout"),
    path("graphs/", include("graphs.urls")),
    path("playground/", include("playground.urls")),
    path("metrics/", include("metrics.urls")),
    path("benchmarks/", include("benchmarks.urls")),
    path("sizing/", include("sizing.urls")),
    path("clusters/", include("clusters.urls")),
    path("api/", include("controlplane.api_urls")),
    path("repos/", include("repos.urls")),
    # The schema describes the API, not its data: readable without a login, like any public spec.
    path("api/schema/", SpectacularAPIView.as_view(permission_classes=[AllowAny]), name="schema"),
    # The split view serves its init script as a file: no inline script under the CSP.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("", include("audit.urls")),
    path("", include("accounts.urls")),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    # Browsers ask for it on pages that name no icon (the admin, the browsable API).
    path("favicon.ico", RedirectView.as_view(url=static("img/favicon.svg"), permanent=True,
                                             http_method_names=["get", "head"])),
]


def _api_aware(page_handler, status: int, detail: str):
    """Errors under /api/ answer JSON like the rest of the API; pages keep their HTML pages."""

    def handler(request, exception=None):
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": detail}, status=status)
        return page_handler(request, exception) if exception is not None else page_handler(request)

    return handler


handler400 = _api_aware(defaults.bad_request, 400, "Bad request.")
handler403 = _api_aware(defaults.permission_denied, 403, "You do not have permission to perform this action.")
handler404 = _api_aware(defaults.page_not_found, 404, "Not found.")
# A dependency that is down (the database, the broker) is a 503 saying so (controlplane/unavailable.py).
handler500 = error_handler(_api_aware(defaults.server_error, 500, "The server could not complete this request."))
