from django.urls import include, path
from rest_framework.routers import DefaultRouter

from . import api, views

app_name = "accounts"

router = DefaultRouter()
router.register("tokens", api.TokenViewSet, basename="token")

urlpatterns = [
    path("account/tokens/", views.token_list, name="tokens"),
    path("account/tokens/<slug:prefix>/revoke/", views.token_revoke, name="revoke"),
    path("api/", include(router.urls)),
]
