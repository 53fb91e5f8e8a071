"""The graph list narrowed the same way in the page, the API and `dynamo-cp graphs list`: search
(name, description, model), namespace, cluster, runtime, state and a label selector; a filter that is not one the
list can narrow by is refused by name (400 in the API, a line on the page, exit 5 in the CLI)."""

from __future__ import annotations

import json

import pytest

from clusters.models import Cluster
from core.catalog import PoolFields, build_spec
from dynamo_cp import exits
from graphs import services
from graphs.models import GraphState
from tests import factories
from tests.dynamo_cp.test_dynamo_cp import Cli, err, out


def _graph(name: str, *, model: str = "m", description: str = "", runtime: str | None = None,
           cluster: Cluster | None = None, namespace: str = "", state: str = GraphState.READY,
           labels: dict | None = None):
    graph = factories.graph(name, model=model, backend="mocker", description=description, pool=PoolFields(gpus=0),
                            labels=labels)
    if runtime:
        factories.deployed(graph, runtime=runtime, cluster=cluster, namespace=namespace, state=state, observed=None)
    return graph


@pytest.fixture
def fleet(db):
    east = Cluster.objects.create(name="east", in_cluster=True)
    west = Cluster.objects.create(name="west", in_cluster=True)
    _graph("chat-llama", model="meta-llama/Llama-3.1-8B", runtime="kubernetes", cluster=east, namespace="team-a",
           labels={"team": "search", "app.kubernetes.io/part-of": "chat", "tier": "prod"})
    _graph("chat-qwen", model="Qwen/Qwen3-0.6B", description="the support bot", runtime="kubernetes", cluster=west,
           namespace="team-b", state=GraphState.DEGRADED, labels={"team": "support", "tier": "dev"})
    _graph("laptop", model="m", runtime="local", state=GraphState.FAILED, labels={"tier": ""})
    _graph("draft", model="m")  # never applied, no labels
    return {"east": east, "west": west}


def _names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [g["name"] for g in response.json()["results"]]


@pytest.mark.parametrize("query,expected", [
    ("", ["chat-llama", "chat-qwen", "draft", "laptop"]),
    ("?search=CHAT", ["chat-llama", "chat-qwen"]),
    ("?search=support", ["chat-qwen"]),  # the description
    ("?search=llama-3.1", ["chat-llama"]),  # the model
    ("?namespace=team-b", ["chat-qwen"]),
    ("?cluster=east", ["chat-llama"]),
    ("?runtime=local", ["laptop"]),
    ("?state=degraded", ["chat-qwen"]),
    ("?state=not_deployed", ["draft"]),
    ("?runtime=kubernetes&state=ready", ["chat-llama"]),
    ("?search=chat&cluster=west&namespace=team-a", []),
    # label selectors, as kubectl get -l reads them
    ("?label=team=search", ["chat-llama"]),
    ("?label=team==support", ["chat-qwen"]),
    ("?label=tier", ["chat-llama", "chat-qwen", "laptop"]),
    ("?label=!tier", ["draft"]),
    ("?label=tier!=dev", ["chat-llama", "draft", "laptop"]),  # without the key too, as in Kubernetes
    ("?label=tier=", ["laptop"]),  # an empty value is a value
    ("?label=tier in (prod, dev)", ["chat-llama", "chat-qwen"]),
    ("?label=tier notin (prod,dev)", ["draft", "laptop"]),
    ("?label=app.kubernetes.io/part-of=chat,tier=prod", ["chat-llama"]),
    ("?label=app.kubernetes.io/part-of=chat,tier=dev", []),
    ("?label=team&search=qwen&namespace=team-b", ["chat-qwen"]),
])
def test_the_api_list_narrows_by_each_filter_and_their_combination(api_for, fleet, query, expected):
    assert _names(api_for("viewer").get(f"/api/graphs/{query}")) == expected


@pytest.mark.parametrize("query,field", [("?state=sleeping", "state"), ("?namespace=Team_A", "namespace"),
                                         ("?runtime=docker", "runtime"), ("?search=" + "x" * 201, "search"),
                                         ("?search=a%00b", "search")])
def test_a_filter_the_list_cannot_narrow_by_is_a_400_naming_it(api_for, fleet, query, field):
    response = api_for("viewer").get(f"/api/graphs/{query}")
    body = response.json()
    assert response.status_code == 400 and (field in body or f"'{field}'" in body.get("detail", "")), body


@pytest.mark.parametrize("selector", ["team%20is%20ml", "Team_A/x=y", "tier%20in%20()", "x>1", "a=b,,c",
                                      "a%20in%20(b", "a" * 64])
def test_a_selector_kubectl_would_refuse_is_a_422_naming_the_label(api_for, fleet, selector):
    """A string, as the schema says, whose selector kubectl would refuse: content."""
    response = api_for("viewer").get(f"/api/graphs/?label={selector}")
    assert response.status_code == 422 and "label" in response.json(), response.content


def test_the_schema_states_the_filters():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    params = {p["name"]: p["schema"] for p in schema["paths"]["/api/graphs/"]["get"]["parameters"]}
    assert {"search", "namespace", "cluster", "runtime", "state", "label", "archived", "cursor", "page_size"} \
        <= set(params) and "page" not in params
    assert "not_deployed" in params["state"]["enum"]
    assert "[-a-z0-9]" in json.dumps(params["namespace"])  # a DNS label, or empty


def test_the_page_narrows_the_same_way_and_says_which_filter_it_could_not_apply(client_for, fleet):
    client = client_for("viewer")
    page = client.get("/graphs/?q=chat&runtime=kubernetes&state=degraded").content.decode()
    assert "chat-qwen" in page and "chat-llama" not in page and "laptop" not in page
    assert '<option value="degraded" selected>' in page
    nothing = client.get("/graphs/?cluster=nowhere").content.decode()
    assert "No graph matches these filters." in nothing
    labelled = client.get("/graphs/?label=tier%20in%20(prod,dev),team!=search").content.decode()
    assert "chat-qwen" in labelled and "chat-llama" not in labelled
    assert 'href="?label=team%3Dsupport"' in labelled  # a row's label chip narrows to its label
    bad = client.get("/graphs/?label=x%3E1").content.decode()
    assert "<code>label</code>" in bad and "numeric comparisons" in bad
    refused = client.get("/graphs/?state=sleeping&namespace=ok").content.decode()
    assert 'id="filter-errors"' in refused and "<code>state</code>" in refused and "not applied" in refused
    assert all(name in refused for name in ("chat-llama", "chat-qwen", "draft", "laptop"))


def test_the_pager_keeps_the_filters(client_for, db):
    for i in range(55):
        _graph(f"pool-{i:02d}", runtime="local")
    _graph("other-graph", runtime="kubernetes", namespace="x")
    client = client_for("viewer")
    page = client.get("/graphs/?q=pool&runtime=local").content.decode()
    assert "Page 1 of 2 · 55 graphs" in page
    assert 'href="?page=2&amp;q=pool&amp;runtime=local"' in page
    # A searched list counts its matches in the page's own query (graph_list_page): the same
    # pages, rows and count as a list counted apart, wherever ?page= points.
    second = client.get("/graphs/?q=pool&runtime=local&page=2").content.decode()
    assert "Page 2 of 2 · 55 graphs" in second
    assert "pool-50" in second and "pool-54" in second and "pool-49" not in second
    for beyond in ("3", "99999999999999999999", "-1", "0"):  # as Paginator.get_page reads them
        assert "Page 2 of 2 · 55 graphs" in client.get(f"/graphs/?q=pool&page={beyond}").content.decode()
    for nonsense in ("x", "1.5e3", ""):
        assert "Page 1 of 2 · 55 graphs" in client.get(f"/graphs/?q=pool&page={nonsense}").content.decode()
    assert "No graph matches these filters." in client.get("/graphs/?q=nothing-like-it&page=2").content.decode()


@pytest.mark.django_db(transaction=True)
def test_dynamo_cp_graphs_list_takes_the_same_filters(live_server, users, tmp_path):
    from accounts.tokens import token_create

    east = Cluster.objects.create(name="east", in_cluster=True)
    _graph("chat-llama", model="meta-llama/Llama-3.1-8B", runtime="kubernetes", cluster=east, namespace="team-a")
    _graph("laptop", runtime="local", state=GraphState.FAILED, labels={"tier": "dev-box"})
    _graph("draft")
    _token, key = token_create(user=users["viewer"], name="dynamo-cp", via="system")
    cli = Cli(live_server.url, key, tmp_path / "home")
    listed = cli("graphs", "list", "--cluster", "east", "--namespace", "team-a", "-o", "json")
    assert listed.returncode == exits.OK, err(listed)
    assert [g["name"] for g in json.loads(out(listed))] == ["chat-llama"]
    assert [g["name"] for g in json.loads(out(cli("graphs", "list", "--state", "not_deployed", "-o", "json")))] \
        == ["draft"]
    assert [g["name"] for g in json.loads(out(cli("graphs", "list", "--search", "LAP", "-o", "json")))] == ["laptop"]
    assert [g["name"] for g in json.loads(out(cli("graphs", "list", "-l", "tier=dev-box", "-o", "json")))] \
        == ["laptop"]
    assert [g["name"] for g in json.loads(out(cli("graphs", "list", "-l", "!tier", "-o", "json")))] \
        == ["chat-llama", "draft"]
    assert out(cli("graphs", "list", "--limit", "1")).count("\n") == 2  # the header and one row
    refused = cli("graphs", "list", "--state", "sleeping")
    assert refused.returncode == exits.INVALID and "state" in err(refused), (refused.returncode, err(refused))
    refused = cli("graphs", "list", "-l", "tier in ()")
    assert refused.returncode == exits.INVALID and "label" in err(refused), (refused.returncode, err(refused))
    for i in range(50):  # past one page: the CLI follows the list's cursor to its end
        _graph(f"z-{i:02d}")
    names = [g["name"] for g in json.loads(out(cli("graphs", "list", "-o", "json")))]
    assert names == ["chat-llama", "draft", "laptop", *(f"z-{i:02d}" for i in range(50))]


def test_the_search_reads_the_head_s_model_as_the_head_moves(api_for, db):
    graph = _graph("moving", model="org/old-model", description="a graph that moves through Straße 9")
    services.graph_update(graph=graph, spec=build_spec(template="mocker-disagg", name="moving", model="org/NEW-model",
                                                       backend="mocker", prefill=PoolFields(gpus=0),
                                                       decode=PoolFields(gpus=0)))
    viewer = api_for("viewer")
    assert _names(viewer.get("/api/graphs/?search=new-MODEL")) == ["moving"]
    assert _names(viewer.get("/api/graphs/?search=old-model")) == []
    assert _names(viewer.get("/api/graphs/?search=THAT MOVES")) == ["moving"]
    # any case, beyond ASCII: the column and the query are case-folded alike (Graph.searchable)
    assert _names(viewer.get("/api/graphs/?search=STRASSE 9")) == ["moving"]
    assert _names(viewer.get("/api/graphs/?search=straße")) == ["moving"]
    assert _names(viewer.get("/api/graphs/?search=100%25")) == []  # % and _ are characters, not wildcards
