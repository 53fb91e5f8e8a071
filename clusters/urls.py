from django.urls import path

from . import views

app_name = "clusters"
urlpatterns = [
    path("", views.cluster_list, name="list"),
    path("new/", views.cluster_edit, name="new"),
    path("<slug:name>/edit/", views.cluster_edit, name="edit"),
    path("<slug:name>/delete/", views.cluster_delete, name="delete"),
    path("<slug:name>/check/", views.cluster_check, name="check"),
    path("<slug:name>/hf-token/", views.hf_token, name="hf_token"),
]
