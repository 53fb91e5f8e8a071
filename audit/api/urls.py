"""The audit log's place in the API's one router (controlplane.api_urls)."""

from . import views

routes = [("audit", views.AuditViewSet, "audit")]
urlpatterns: list = []
