# ruff: noqa: F811 (pytest fixtures are imported by name and injected as arguments)
"""The OpenAI endpoint as the official OpenAI Python SDK uses it, against a real Dynamo 1.6.1
graph (frontend + mocker workers) through the product's entry point and through the plain
Django views: models.list(), streamed and unstreamed chat and completions, and errors that the
SDK turns into its own exception types with the message intact (the proxy's and the
frontend's)."""

from __future__ import annotations

import openai
import pytest

from tests.playground_fixtures import (  # noqa: F401
    _fresh_limits,
    asgi_server,
    chat_graph,
    dynamo_graph,
    make_graph,
    routed_server,
    tokens,
)

pytestmark = [pytest.mark.dynamo, pytest.mark.django_db(transaction=True)]


def sdk(server, token: str, graph: str = "pg-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/api/playground/{graph}/v1", api_key=token, max_retries=0,
                         timeout=30)


def test_models_list_names_the_model_the_frontend_serves(asgi_server, dynamo_graph, chat_graph, tokens):
    models = sdk(asgi_server, tokens["operator"]).models.list()
    assert [m.id for m in models.data] == [dynamo_graph.model]
    assert models.data[0].object == "model"


def test_a_streamed_chat_through_the_sdk(asgi_server, dynamo_graph, chat_graph, tokens):
    stream = sdk(asgi_server, tokens["operator"]).chat.completions.create(
        model=dynamo_graph.model, messages=[{"role": "user", "content": "Hello there"}], max_tokens=12,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage.completion_tokens == 12
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)


def test_an_unstreamed_chat_and_a_completion_through_the_sdk(asgi_server, dynamo_graph, chat_graph, tokens):
    client = sdk(asgi_server, tokens["operator"])
    chat = client.chat.completions.create(model=dynamo_graph.model, messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=5, extra_body={"ignore_eos": True})
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens == 5
    completion = client.completions.create(model=dynamo_graph.model, prompt="Once upon a time", max_tokens=6,
                                           extra_body={"ignore_eos": True})
    assert completion.object == "text_completion" and completion.usage.completion_tokens == 6
    streamed = list(client.completions.create(model=dynamo_graph.model, prompt="Once", max_tokens=4, stream=True,
                                              extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in streamed if c.choices)


def test_the_model_may_be_left_out_the_graphs_is_used(asgi_server, dynamo_graph, chat_graph, tokens):
    client = sdk(asgi_server, tokens["operator"])
    completion = client.completions.create(model="", prompt="Once upon a time", max_tokens=3)
    assert completion.model == dynamo_graph.model


def test_errors_reach_the_sdk_as_its_own_exceptions_with_their_message(asgi_server, dynamo_graph, chat_graph,
                                                                       tokens, users):
    client = sdk(asgi_server, tokens["operator"])
    with pytest.raises(openai.NotFoundError) as frontend:  # the frontend's 404, reshaped
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert frontend.value.body["message"] == "Model not found"
    with pytest.raises(openai.BadRequestError) as ours:
        client.chat.completions.create(model=dynamo_graph.model, messages=[])
    assert "messages must be a non-empty list" in str(ours.value)
    assert ours.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError, match="prompt must be a string"):
        client.completions.create(model=dynamo_graph.model, prompt=[])
    with pytest.raises(openai.AuthenticationError, match="the token is not valid"):
        sdk(asgi_server, "not-a-token").models.list()
    with pytest.raises(openai.PermissionDeniedError, match="viewers may not chat"):
        sdk(asgi_server, tokens["viewer"]).models.list()
    with pytest.raises(openai.NotFoundError, match="no graph named 'nope'"):
        sdk(asgi_server, tokens["operator"], graph="nope").models.list()


def test_a_graph_whose_frontend_is_down_answers_502_in_openais_shape(asgi_server, users, tokens):
    from tests.playground_fixtures import free_port

    make_graph("pg-gone", "m", f"http://127.0.0.1:{free_port()}", user=users["admin"])
    with pytest.raises(openai.APIStatusError) as down:
        sdk(asgi_server, tokens["operator"], graph="pg-gone").models.list()
    assert down.value.status_code == 502 and down.value.body["type"] == "upstream_unavailable"


def test_the_rest_of_the_openai_api_answers_an_openai_shaped_404(routed_server, tokens):
    """The product's entry point answers it itself (plain Django would send its HTML 404 page)."""
    with pytest.raises(openai.NotFoundError, match="is not served: a graph serves GET v1/models"):
        sdk(routed_server, tokens["operator"]).embeddings.create(model="m", input="x")
