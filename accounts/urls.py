from django.urls import path

from . import views

app_name = "accounts"

urlpatterns = [
    path("account/tokens/", views.token_list, name="tokens"),
    path("account/tokens/<slug:prefix>/revoke/", views.token_revoke, name="revoke"),
]
