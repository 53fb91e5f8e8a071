"""The REST API under /api/: one router for every app's viewsets, one namespace ("api").

Each app's ``APP/api/urls.py`` lists its ``routes`` (prefix, viewset, basename) and any
``urlpatterns`` that are not a viewset; they are mounted here, once."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from accounts.api import urls as accounts_api
from audit.api import urls as audit_api
from benchmarks.api import urls as benchmarks_api
from clusters.api import urls as clusters_api
from endpoint.api import urls as endpoint_api
from graphs.api import urls as graphs_api
from metrics.api import urls as metrics_api
from repos.api import urls as repos_api
from sizing.api import urls as sizing_api

APPS = (graphs_api, clusters_api, benchmarks_api, metrics_api, endpoint_api, repos_api, sizing_api, accounts_api,
        audit_api)

app_name = "api"
router = DefaultRouter()
for app in APPS:
    for prefix, viewset, basename in app.routes:
        router.register(prefix, viewset, basename=basename)

urlpatterns = [*(p for app in APPS for p in app.urlpatterns), path("", include(router.urls))]
