from django.urls import path

from . import views

urlpatterns = [
    # Not "audit-list": the router names the API's list that, and the later name won.
    path("audit/", views.audit_list, name="audit-page"),
]
