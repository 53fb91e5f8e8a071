"""The graph list's filters as a request states them: query parameters read through one
declaration by the API (``GET /api/graphs/``), the graph list page and ``dynamo-cp graphs list``,
each refused by name when it is not one the list can narrow by."""

from __future__ import annotations

from rest_framework import serializers

from core.errors import UNPROCESSABLE
from core.labels import FORMS_TEXT, MAX_SELECTOR, SelectorError, parse_selector
from core.spec import DNS1123_LABEL

from .models import GraphState
from .runtimes.registry import KINDS
from .selectors import GraphFilter


class GraphFilterSerializer(serializers.Serializer):
    """The list's query parameters (selectors.GraphFilter): the API, the graph list page and
    ``dynamo-cp graphs list`` read them through this one declaration."""

    search = serializers.CharField(required=False, allow_blank=True, max_length=200, trim_whitespace=False,
                                   help_text="text in the graph's name, description or model (any case)")
    namespace = serializers.RegexField(DNS1123_LABEL.pattern, required=False, allow_blank=True, max_length=63,
                                       help_text="the Kubernetes namespace the graph is deployed in")
    cluster = serializers.CharField(required=False, allow_blank=True, max_length=100, trim_whitespace=False,
                                    help_text="the registered cluster the graph is deployed on, by name")
    runtime = serializers.ChoiceField(choices=KINDS, required=False, allow_blank=True,
                                      help_text="where the graph runs: local processes or a cluster")
    state = serializers.ChoiceField(choices=GraphState.choices, required=False, allow_blank=True,
                                    help_text="its live state (not_deployed: also graphs never applied)")

    label = serializers.CharField(required=False, allow_blank=True, max_length=MAX_SELECTOR, trim_whitespace=False,
                                  help_text="a Kubernetes label selector on the DynamoGraphDeployment's labels, as "
                                  f"kubectl get -l reads it: {FORMS_TEXT}, joined by commas (team=ml,tier!=dev)")

    def validate_label(self, value: str):
        """A string the schema allows whose selector kubectl would refuse: content (422 in the API)."""
        try:
            return parse_selector(value)
        except SelectorError as e:
            raise serializers.ValidationError(str(e), code=UNPROCESSABLE) from None

    def filter(self) -> GraphFilter:
        given = {("labels" if name == "label" else name): value for name, value in self.validated_data.items()}
        return GraphFilter(**{name: value for name, value in given.items() if value})


LIST_FILTERS = ("namespace", "cluster", "runtime", "state", "label")  # the page's names; its search is ?q=


def list_query(params) -> tuple[dict, GraphFilter, dict, bool]:
    """What the graph list page shows, as its query string (``params``) says: the filters as
    given, the filter that applies (without any field that does not validate), each such field's
    error, and whether it lists the archived graphs. The page and its stream (graphs.live) read
    it alike."""
    # ?q= is the search box's (and older links'); the other filters are the API's own names.
    given = {"search": params.get("q", "").strip(), **{k: params.get(k, "").strip() for k in LIST_FILTERS}}
    where = GraphFilterSerializer(data=given)
    errors = {} if where.is_valid() else {k: " ".join(map(str, v)) for k, v in where.errors.items()}
    # Archived graphs (A/B study variants a study has torn down) are a list of their own.
    return given, where.filter() if not errors else GraphFilter(), errors, params.get("archived") == "1"
