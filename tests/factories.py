"""One way for tests to make graphs and what a runtime writes of them, through the product's own
service (``graphs.services.graph_create``), from a catalog template, as a user would:

* :func:`graph`: a stored graph at revision 1. By default the mocker template (Dynamo's mocker
  engine), which every runtime here can run.
* :func:`deployed`: the Deployment row a runtime's observer writes once the graph is applied.
* :func:`serving`: both: a graph deployed and ready at ``endpoint`` (the playground, benchmarks
  and the OpenAI endpoint read their graph's frontend there).

Test modules keep helpers of their own only for what is theirs (a topology, a fleet), and make
the graph itself here."""

from __future__ import annotations

from django.utils import timezone

from core.catalog import build_spec
from core.pool import PoolFields
from graphs import services
from graphs.models import Deployment, Graph, GraphState

# A worker pool this host can run: no GPU, a small /dev/shm, no Hugging Face token to find.
CPU = PoolFields(gpus=0, shared_memory="1Gi", hf_token_secret="")
_UNSET = object()


def spec(name: str = "g", *, template: str = "mocker-disagg", pool: PoolFields | None = None,
         labels: dict | None = None, **build):
    """A graph's spec from ``template`` (its model and backend unless told, as build_spec gives
    them); ``pool`` sets both worker pools (unless ``prefill`` or ``decode`` is given);
    ``labels`` become the DGD's."""
    if pool is not None:
        build.setdefault("prefill", pool)
        build.setdefault("decode", pool)
    made = build_spec(template=template, name=name, **build)
    if labels is not None:
        made = made.model_copy(update={"metadata_extra": {"labels": labels}})
    return made


def graph(name: str = "g", *, user=None, description: str = "", **spec_fields) -> Graph:
    """A stored graph (revision 1), made as the create form and the API make one."""
    return services.graph_create(spec=spec(name, **spec_fields), user=user, description=description)


def deployed(graph: Graph, *, runtime: str = "local", state: str = GraphState.READY, endpoint: str = "",
             active: bool = True, observed=_UNSET, **fields) -> Deployment:
    """The graph's Deployment row, at its head revision, as the runtime's observer writes it
    (``observed``: its time; now unless told, None for a graph not yet looked at)."""
    observed_at = timezone.now() if observed is _UNSET else observed
    return Deployment.objects.create(graph=graph, runtime=runtime, revision=graph.head, active=active, state=state,
                                     endpoint=endpoint, observed_at=observed_at, **fields)


def serving(name: str = "g", *, endpoint: str, state: str = GraphState.READY, runtime: str = "local",
            active: bool = True, observed=_UNSET, user=None, **spec_fields) -> Graph:
    """A graph deployed at ``endpoint`` (its frontend's URL), in ``state``."""
    made = graph(name, user=user, **spec_fields)
    deployed(made, runtime=runtime, state=state, endpoint=endpoint, active=active, observed=observed)
    return made
