from django.urls import path

from . import live, manifest_pages, views

app_name = "graphs"
NAME = "<slug:name>"
urlpatterns = [
    path("", views.graph_list, name="list"),
    # "_" is in no graph's name (a DNS label): the path is never a graph's page.
    path("_events/", live.graph_list_events, name="list_events"),
    path("new/", views.graph_new, name="new"),
    path("import/", manifest_pages.graph_import, name="import"),
    path("check/", manifest_pages.manifest_check, name="check"),
    path(f"{NAME}/", views.graph_detail, name="detail"),
    path(f"{NAME}/edit/", manifest_pages.graph_import, name="edit"),
    path(f"{NAME}/status/", views.graph_status, name="status"),
    path(f"{NAME}/events/", live.graph_events, name="events"),
    path(f"{NAME}/apply/", views.graph_apply, name="apply"),
    path(f"{NAME}/scale/", views.graph_scale, name="scale"),
    path(f"{NAME}/undeploy/", views.graph_undeploy, name="undeploy"),
    path(f"{NAME}/delete/", views.graph_delete, name="delete"),
    path(f"{NAME}/revisions/", manifest_pages.revision_list, name="revisions"),
    path(f"{NAME}/rollback/", manifest_pages.revision_rollback, name="rollback"),
    path(f"{NAME}/export/", manifest_pages.export, name="export"),
    path(f"{NAME}/pods/<str:pod>/log/", views.pod_log, name="pod_log"),
]
