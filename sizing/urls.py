from django.urls import path

from . import views

app_name = "sizing"
urlpatterns = [
    path("", views.estimate_new, name="new"),
    path("estimates/", views.estimate_list, name="list"),
    path("estimates/<int:pk>/", views.estimate_detail, name="estimate"),
    path("estimates/<int:pk>/graph/", views.estimate_graph, name="graph"),
    path("estimates/<int:pk>/dgdr/", views.estimate_dgdr, name="dgdr"),
    path("requests/<int:pk>/refresh/", views.request_refresh, name="request-refresh"),
    path("requests/<int:pk>/adopt/", views.request_adopt, name="request-adopt"),
    path("compare/", views.estimate_compare, name="compare"),
]
