from django.urls import path

from availability.waiting import waiting

from . import views

app_name = "clusters"
urlpatterns = waiting([  # every view here waits on a cluster's API server
    path("", views.cluster_list, name="list"),
    path("new/", views.cluster_edit, name="new"),
    path("<slug:name>/edit/", views.cluster_edit, name="edit"),
    path("<slug:name>/delete/", views.cluster_delete, name="delete"),
    path("<slug:name>/check/", views.cluster_check, name="check"),
    path("<slug:name>/hf-token/", views.hf_token, name="hf_token"),
], "a cluster's API server")
