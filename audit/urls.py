from django.urls import include, path
from rest_framework.routers import DefaultRouter

from . import views

router = DefaultRouter()
router.register("audit", views.AuditViewSet, basename="audit")

urlpatterns = [
    # Not "audit-list": the router names the API's list that, and the later name won.
    path("audit/", views.audit_list, name="audit-page"),
    path("api/", include(router.urls)),
]
