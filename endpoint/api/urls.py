"""The OpenAI-compatible endpoint of every serving graph, in the API's one URL list
(controlplane.api_urls): an OpenAI client's ``base_url`` is ``.../api/playground/{graph}/v1``.
controlplane.asgi serves these paths itself (endpoint.asgi, outside the middleware stack);
these routes name them and serve them under any other server."""

from django.urls import path

from .. import proxy

routes: list = []
urlpatterns = [
    path("playground/<slug:graph>/v1/chat/completions", proxy.chat_completions, name="playground-chat-completions"),
    path("playground/<slug:graph>/v1/completions", proxy.completions, name="playground-completions"),
    path("playground/<slug:graph>/v1/models", proxy.models, name="playground-models"),
]
