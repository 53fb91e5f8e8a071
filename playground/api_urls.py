"""The OpenAI-compatible pass-through: ``/api/playground/{graph}/v1/chat/completions``, so an
OpenAI client's ``base_url`` is ``.../api/playground/{graph}/v1``."""

from django.urls import path

from . import proxy

app_name = "playground-api"
urlpatterns = [
    path("<slug:graph>/v1/chat/completions", proxy.chat_completions, name="chat_completions"),
]
