from django.urls import path

from availability.waiting import waiting

from . import views

app_name = "metrics"
NAME = "graphs/<slug:name>"
urlpatterns = waiting([  # every view here waits on Prometheus
    path("", views.overview, name="overview"),
    path(f"{NAME}/panel/", views.graph_panel, name="panel"),
    path(f"{NAME}/chart/", views.graph_chart, name="chart"),
    path(f"{NAME}/objectives/", views.objectives_edit, name="objectives"),
], "Prometheus")
