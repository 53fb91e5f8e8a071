from django.urls import path

from . import views

app_name = "repos"
urlpatterns = [
    path("", views.repository_list, name="list"),
    path("<slug:name>/", views.repository_detail, name="detail"),
    path("<slug:name>/sync/", views.repository_sync_now, name="sync"),
    path("<slug:name>/delete/", views.repository_delete, name="delete"),
    path("<slug:name>/link/", views.graph_link, name="link"),
    path("<slug:name>/commit/<slug:graph>/", views.graph_commit, name="commit"),
    path("<slug:name>/exports/<int:pk>/", views.export_detail, name="export"),
]
