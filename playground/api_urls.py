"""The OpenAI-compatible endpoint of every serving graph: an OpenAI client's ``base_url`` is
``.../api/playground/{graph}/v1``. controlplane.asgi serves these paths itself (playground.asgi,
outside the middleware stack); these routes name them and serve them under any other server."""

from django.urls import path

from . import proxy

app_name = "playground-api"
urlpatterns = [
    path("<slug:graph>/v1/chat/completions", proxy.chat_completions, name="chat_completions"),
    path("<slug:graph>/v1/completions", proxy.completions, name="completions"),
    path("<slug:graph>/v1/models", proxy.models, name="models"),
]
