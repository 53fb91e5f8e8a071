"""The playground's pages: who sees which graphs, kept conversations (owned, validated,
reopened), the policy page and the Django admin."""

from __future__ import annotations

import json

import pytest

from endpoint.models import PlaygroundPolicy
from playground.models import Conversation
from tests.playground_fixtures import make_graph
from tests.playground_timing import percentile, server_breakdown, summarise

TIMING = {"ttft_ms": 31.5, "itl_mean_ms": 5.8, "itl_p90_ms": 6.4, "tokens_per_s": 171.2, "total_ms": 80.1,
          "chunks": 8, "prompt_tokens": 9, "completion_tokens": 8, "cached_tokens": 0, "finish_reason": "length",
          "prefill_worker_id": "1434744929543531561", "decode_worker_id": "14783050199710921453",
          "server": {"queue_ms": 0.6, "prefill_ms": 30.3, "kv_transfer_ms": 0.0, "decode_ms": 77.9,
                     "ttft_ms": 30.9, "total_ms": 108.8}}


@pytest.fixture
def graphs(users):
    serving = make_graph("pg-a", "model-a", "http://127.0.0.1:9", user=users["admin"])
    other = make_graph("pg-b", "model-b", "http://127.0.0.1:9", user=users["admin"])
    stopped = make_graph("pg-off", "model-c", "http://127.0.0.1:9", user=users["admin"], state="not_deployed",
                         active=False)
    return serving, other, stopped


def conversation(graph="pg-a", **extra) -> dict:
    data = {"graph": graph, "title": "", "system_prompt": "Be brief.",
            "params": {"temperature": 0.2, "top_p": 0.9, "max_tokens": 64, "stop": ["\n\n"]},
            "messages": [{"role": "user", "content": "What is   disaggregated\nserving?", "timing": None},
                         {"role": "assistant", "content": "Prefill and decode apart.", "timing": TIMING}]}
    data.update(extra)
    return data


def post_json(client, url, data):
    return client.post(url, data=json.dumps(data), content_type="application/json")


# --- pages --------------------------------------------------------------------------------------

def test_the_chat_page_lists_serving_graphs_for_operators(client_for, graphs):
    page = client_for("operator").get("/playground/").content.decode()
    assert 'value="pg-a" data-model="model-a"' in page and 'value="pg-b"' in page
    assert 'value="pg-off"' not in page
    assert 'data-playground="chat"' in page
    assert "js/playground.js" in page and "css/playground.css" in page
    assert "<script>" not in page  # no inline script: the pages will run under a strict CSP


def test_viewers_see_only_the_graphs_opened_to_them(client_for, graphs):
    viewer = client_for("viewer")
    page = viewer.get("/playground/").content.decode()
    assert 'value="pg-a"' not in page and "an admin has opened to them" in page
    PlaygroundPolicy.objects.create(graph=graphs[0], viewers_may_chat=True)
    page = viewer.get("/playground/").content.decode()
    assert 'value="pg-a"' in page and 'value="pg-b"' not in page


def test_the_side_by_side_page_preselects_two_different_graphs(client_for, graphs):
    page = client_for("operator").get("/playground/compare/").content.decode()
    assert page.count('data-column="') == 2
    assert 'value="pg-b" data-model="model-b" selected' in page


def test_both_playgrounds_name_a_replys_workers_by_pod_where_the_runtime_reported_them(client_for, graphs):
    deployment = graphs[0].deployment
    deployment.runtime_info = {"workers": {"417644168304993217": "pg-a-decode-0"}}
    deployment.save(update_fields=["runtime_info"])
    for url in ("/playground/", "/playground/compare/"):
        page = client_for("operator").get(url).content.decode()
        assert "data-workers=\"{&quot;417644168304993217&quot;: &quot;pg-a-decode-0&quot;}\"" in page, url


@pytest.mark.parametrize("url", ["/playground/", "/playground/compare/", "/playground/conversations/"])
def test_pages_need_a_role(client_for, graphs, url):
    assert client_for(None).get(url).status_code == 302  # to the login page
    assert client_for("norole").get(url).status_code == 403
    assert client_for("viewer").get(url).status_code == 200


def test_the_policies_page_is_for_admins(client_for, graphs):
    assert client_for("operator").get("/playground/policies/").status_code == 403
    page = client_for("admin").get("/playground/policies/").content.decode()
    assert "pg-a" in page and "Open to viewers" in page


# --- conversations ------------------------------------------------------------------------------

def test_a_conversation_is_kept_with_its_timings_and_reopened(client_for, users, graphs):
    operator = client_for("operator")
    response = post_json(operator, "/playground/conversations/new/", conversation())
    assert response.status_code == 201
    kept = Conversation.objects.get(pk=response.json()["id"])
    assert kept.owner == users["operator"]
    assert kept.title == "What is disaggregated serving?"
    assert kept.chat_params.stop == ["\n\n"]
    reply = kept.messages.get(position=1)
    assert reply.reply_timing.server.prefill_ms == 30.3
    assert reply.reply_timing.decode_worker_id == "14783050199710921453"  # exact: not a float
    assert reply.reply_timing.cached_tokens == 0  # the reply's cached prompt tokens are kept with it

    page = operator.get(response.json()["url"]).content.decode()
    assert 'id="pg-conversation"' in page and "Prefill and decode apart." in page
    listing = operator.get("/playground/conversations/").content.decode()
    assert "What is disaggregated serving?" in listing


def test_saving_again_replaces_the_turns(client_for, graphs):
    operator = client_for("operator")
    created = post_json(operator, "/playground/conversations/new/", conversation(title="Kept")).json()
    longer = conversation(title="Kept")
    longer["messages"] += [{"role": "user", "content": "And KV transfer?"},
                           {"role": "assistant", "content": "Over NIXL.", "timing": TIMING}]
    assert post_json(operator, created["save_url"], longer).status_code == 200
    kept = Conversation.objects.get(pk=created["id"])
    assert [m.content for m in kept.messages.all()][-1] == "Over NIXL."
    assert Conversation.objects.count() == 1


def test_conversations_belong_to_their_owner(client_for, graphs):
    created = post_json(client_for("operator"), "/playground/conversations/new/", conversation()).json()
    admin = client_for("admin")
    assert admin.get(created["url"]).status_code == 404
    assert post_json(admin, created["save_url"], conversation()).status_code == 404
    assert admin.post(f"/playground/conversations/{created['id']}/delete/").status_code == 404
    assert "What is" not in admin.get("/playground/conversations/").content.decode()
    assert client_for("operator").post(f"/playground/conversations/{created['id']}/delete/").status_code == 302
    assert not Conversation.objects.exists()


def test_the_number_of_kept_conversations_has_a_quota_with_a_clear_message(client_for, graphs, settings):
    settings.PLAYGROUND_CONVERSATIONS_MAX = 2
    operator = client_for("operator")
    kept = [post_json(operator, "/playground/conversations/new/", conversation()) for _ in range(2)]
    assert [r.status_code for r in kept] == [201, 201]
    refused = post_json(operator, "/playground/conversations/new/", conversation())
    assert refused.status_code == 413
    assert "you keep 2 conversations, the most allowed" in refused.json()["error"]["message"]
    assert Conversation.objects.count() == 2
    # Saving one of those two again is no new conversation; other users have quotas of their own.
    assert post_json(operator, kept[0].json()["save_url"], conversation(title="again")).status_code == 200
    assert post_json(client_for("admin"), "/playground/conversations/new/", conversation()).status_code == 201


def test_the_bytes_of_kept_conversations_have_a_quota(client_for, graphs, settings):
    one = conversation()
    size = len(one["system_prompt"].encode()) + sum(len(m["content"].encode()) for m in one["messages"])
    settings.PLAYGROUND_CONVERSATION_BYTES = 2 * size + 10
    operator = client_for("operator")
    first = post_json(operator, "/playground/conversations/new/", conversation()).json()
    assert post_json(operator, "/playground/conversations/new/", conversation()).status_code == 201
    assert Conversation.objects.get(pk=first["id"]).size_bytes == size
    refused = post_json(operator, "/playground/conversations/new/", conversation())
    assert refused.status_code == 413
    assert f"more than the {2 * size + 10:,} allowed" in refused.json()["error"]["message"]
    # Growing a kept one past the quota is refused too, and leaves its turns as they were.
    longer = conversation()
    longer["messages"] += [{"role": "user", "content": "x" * 20}]
    assert post_json(operator, first["save_url"], longer).status_code == 413
    assert Conversation.objects.get(pk=first["id"]).messages.count() == 2
    assert Conversation.objects.count() == 2


def test_saving_conversations_is_rate_limited_with_retry_after(client_for, graphs, settings):
    import time

    from django.core.cache import cache

    cache.clear()
    settings.PLAYGROUND_CONVERSATION_SAVES_PER_MINUTE = 3
    operator = client_for("operator")
    if time.time() % 60 > 55:  # the saves must fall in one rate window
        time.sleep(60.5 - time.time() % 60)
    created = post_json(operator, "/playground/conversations/new/", conversation())
    saves = [post_json(operator, created.json()["save_url"], conversation()) for _ in range(3)]
    assert [created.status_code] + [r.status_code for r in saves] == [201, 200, 200, 429]
    assert "more than 3 conversation saves in a minute" in saves[-1].json()["error"]["message"]
    assert 1 <= int(saves[-1]["Retry-After"]) <= 60


def test_a_conversation_is_validated(client_for, graphs):
    operator = client_for("operator")
    bad_timing = conversation()
    bad_timing["messages"][1]["timing"] = {**TIMING, "decode_worker_id": 1.4783050199710921e19}
    for data in (conversation(graph="nope"), conversation(messages=[{"role": "system", "content": "x"}]),
                 bad_timing, conversation(params={"temperature": 5})):
        assert post_json(operator, "/playground/conversations/new/", data).status_code == 400
    assert not Conversation.objects.exists()


def test_viewers_keep_conversations_only_where_they_may_chat(client_for, graphs):
    viewer = client_for("viewer")
    assert post_json(viewer, "/playground/conversations/new/", conversation()).status_code == 403
    PlaygroundPolicy.objects.create(graph=graphs[0], viewers_may_chat=True)
    assert post_json(viewer, "/playground/conversations/new/", conversation()).status_code == 201


def test_a_conversation_outlives_its_graph(client_for, graphs):
    operator = client_for("operator")
    created = post_json(operator, "/playground/conversations/new/", conversation()).json()
    from graphs.models import Deployment
    from graphs.services import graph_delete

    Deployment.objects.filter(graph=graphs[0]).delete()  # as after an undeploy
    graph_delete(graph=graphs[0])
    listing = operator.get("/playground/conversations/").content.decode()
    assert "pg-a" in listing and "(deleted)" in listing
    assert operator.get(created["url"]).status_code == 200


# --- the admin ----------------------------------------------------------------------------------

def test_admins_edit_policies_in_the_django_admin(users, graphs):
    from django.test import Client

    client = Client()
    client.force_login(users["admin"])
    users["admin"].is_staff = True
    users["admin"].is_superuser = True
    users["admin"].save()
    response = client.post("/admin/endpoint/playgroundpolicy/add/",
                           {"graph": graphs[1].pk, "viewers_may_chat": "on"})
    assert response.status_code == 302
    policy = PlaygroundPolicy.objects.get(graph=graphs[1])
    assert policy.viewers_may_chat and policy.updated_by == users["admin"]
    assert client.get("/admin/playground/conversation/").status_code == 200


# --- the timing arithmetic ----------------------------------------------------------------------

def test_timings_follow_the_arrival_times():
    out = summarise(0.0, [30.0, 31.0, 37.0, 43.0, 49.0], completion_tokens=6, end=60.0)
    assert out == {"chunks": 5, "ttft_ms": 30.0, "itl_mean_ms": 4.75, "itl_p90_ms": 6.0, "tokens_per_s": 263.16,
                   "total_ms": 60.0}
    assert summarise(0.0, [], end=12.0) == {"chunks": 0, "ttft_ms": None, "itl_mean_ms": None, "itl_p90_ms": None,
                                            "tokens_per_s": None, "total_ms": 12.0}
    assert percentile([1, 2, 3, 4], 0.9) == pytest.approx(3.7)


def test_the_server_breakdown_reads_nvext_timing():
    out = server_breakdown({"request_received_ms": 1795975257255, "prefill_wait_time_ms": 0.59,
                            "prefill_time_ms": 30.29, "ttft_ms": 30.88, "total_time_ms": 108.81,
                            "kv_transfer_estimated_latency_ms": 0.0})
    assert out == {"queue_ms": 0.59, "prefill_ms": 30.29, "kv_transfer_ms": 0.0, "decode_ms": 77.93,
                   "ttft_ms": 30.88, "total_ms": 108.81}
    assert server_breakdown(None) is None
