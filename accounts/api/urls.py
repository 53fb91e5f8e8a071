"""API tokens' place in the API's one router (controlplane.api_urls)."""

from . import views

routes = [("tokens", views.TokenViewSet, "token")]
urlpatterns: list = []
