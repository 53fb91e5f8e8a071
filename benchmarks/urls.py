from django.urls import path

from availability.waiting import waiting

from . import views

app_name = "benchmarks"
urlpatterns = waiting([  # every view here waits on Prometheus and a benchmark's files
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
    path("runs/<int:pk>/cancel/", views.run_cancel, name="cancel"),
    path("runs/<int:pk>/artifacts/", views.run_artifacts, name="artifacts"),
    path("runs/<int:pk>/log/", views.run_log, name="log"),
    path("runs/<int:pk>/report/", views.run_report, name="report"),
    path("compare/", views.compare, name="compare"),
    path("compare/report/", views.compare_report, name="compare_report"),
    path("studies/new/", views.study_new, name="study_new"),
    path("studies/<int:pk>/", views.study_detail, name="study"),
    path("studies/<int:pk>/cancel/", views.study_cancel, name="study_cancel"),
    path("graphs/<slug:name>/sizing/", views.graph_sizing, name="sizing"),
    path("graphs/<slug:name>/recommend/", views.graph_recommend, name="recommend"),
    path("recommendations/<int:pk>/apply/", views.recommendation_apply, name="apply_recommendation"),
], "Prometheus and a benchmark's files")
