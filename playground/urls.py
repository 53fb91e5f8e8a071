from django.urls import path

from . import views

app_name = "playground"
urlpatterns = [
    path("", views.chat, name="chat"),
    path("compare/", views.compare, name="compare"),
    path("conversations/", views.conversation_list, name="conversations"),
    path("conversations/new/", views.conversation_create, name="conversation_create"),
    path("conversations/<int:pk>/", views.conversation_update, name="conversation_update"),
    path("conversations/<int:pk>/delete/", views.conversation_delete, name="conversation_delete"),
    path("policies/", views.policies, name="policies"),
    path("limits/", views.api_limits, name="api_limits"),
    path("exposure/<slug:graph>/", views.exposure, name="exposure"),
]
