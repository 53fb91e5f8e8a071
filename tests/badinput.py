"""A shared corpus of bad manifests. Every entry must be refused by every entry point (API
import and validate, the CLI, the HTML import form, the YAML editor's live check) with a
message that names the problem, and must never cause a 500 or store anything.

Each case has:

* ``id``: a short name (pytest ids);
* ``body``: the manifest as text, or bytes when it is not valid UTF-8;
* ``expect``: a substring that some finding's path or message (or the error detail) contains;
* ``parsable``: whether the body is one well-formed YAML document (the validate endpoints
  answer 200 with valid=false for those, 400 for the rest).

Every manifest is named ``g`` unless the name is the problem, so tests can create a graph
called ``g`` first and check that no revision was added to it either."""

from __future__ import annotations

from dataclasses import dataclass

GRAPH_NAME = "g"


@dataclass(frozen=True)
class BadInput:
    id: str
    body: str | bytes
    expect: str
    parsable: bool = True

    @property
    def data(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else self.body.encode("utf-8")

    @property
    def is_text(self) -> bool:
        return isinstance(self.body, str)

    def __str__(self) -> str:
        return self.id


def _beta(components: str, name: str = GRAPH_NAME, api_version: str = "nvidia.com/v1beta1",
          kind: str = "DynamoGraphDeployment") -> str:
    return f"""apiVersion: {api_version}
kind: {kind}
metadata:
  name: {name}
spec:
  components:
{components}"""


FRONTEND = """  - name: Frontend
    type: frontend
    replicas: 1
    podTemplate:
      spec:
        containers:
        - name: main
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1
          command: [python3]
          args: [-m, dynamo.frontend]
"""

CASES: list[BadInput] = [
    BadInput("malformed-yaml-unclosed-bracket",
             "apiVersion: nvidia.com/v1beta1\nkind: DynamoGraphDeployment\nmetadata: {name: g\n"
             "spec:\n  components: [\n",
             "malformed YAML", parsable=False),
    BadInput("services-as-a-list-in-v1alpha1",
             """apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: g
spec:
  services:
  - name: Frontend
    componentType: frontend
    replicas: 1
""",
             "spec.services"),
    BadInput("components-as-a-map-in-v1beta1",
             """apiVersion: nvidia.com/v1beta1
kind: DynamoGraphDeployment
metadata:
  name: g
spec:
  components:
    Frontend:
      type: frontend
      replicas: 1
""",
             "spec.components"),
    BadInput("unknown-field", _beta(FRONTEND + "    replicaCount: 2\n"), "spec.components[0].replicaCount"),
    BadInput("wrong-type-replicas-two", _beta(FRONTEND.replace("replicas: 1", 'replicas: "two"')),
             "spec.components[0].replicas"),
    BadInput("negative-replicas", _beta(FRONTEND.replace("replicas: 1", "replicas: -1")), "at least 0"),
    BadInput("duplicate-service-key-in-v1alpha1",
             """apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: g
spec:
  services:
    Frontend:
      componentType: frontend
      replicas: 1
    Frontend:
      componentType: frontend
      replicas: 2
""",
             "duplicate key 'Frontend'", parsable=False),
    BadInput("duplicate-component-names-in-v1beta1", _beta(FRONTEND + FRONTEND), "two services are named 'Frontend'"),
    BadInput("components-differing-only-by-case",
             _beta(FRONTEND + FRONTEND.replace("name: Frontend", "name: frontend")),
             "two services are named 'frontend'"),
    BadInput("graph-name-with-capitals", _beta(FRONTEND, name="MyGraph"), "'MyGraph' is not a valid Kubernetes name"),
    BadInput("graph-name-too-long", _beta(FRONTEND, name="g" * 64), "longer than 63 characters"),
    BadInput("empty-document", "", "empty", parsable=False),
    BadInput("comment-only-document", "# nothing but a comment\n---\n", "the manifest is empty", parsable=False),
    BadInput("two-documents", _beta(FRONTEND) + "---\n" + _beta(FRONTEND),
             "two DynamoGraphDeployments named 'g'", parsable=False),
    BadInput("a-list-not-a-mapping", "- apiVersion: nvidia.com/v1beta1\n- kind: DynamoGraphDeployment\n",
             "must be a", parsable=False),
    BadInput("wrong-api-version", _beta(FRONTEND, api_version="nvidia.com/v2"), "'nvidia.com/v2'"),
    BadInput("wrong-kind", _beta(FRONTEND, kind="Deployment"), "kind must be DynamoGraphDeployment"),
    BadInput("missing-name", _beta(FRONTEND).replace("  name: g\n", "  labels: {a: b}\n"), "metadata.name"),
    BadInput("non-utf8-body", _beta(FRONTEND).replace("name: g", "name: g\n  annotations: {note: caf\xe9}")
             .encode("latin-1"), "UTF-8", parsable=False),
    BadInput("absurd-replicas-100000", _beta(FRONTEND.replace("replicas: 1", "replicas: 100000")), "512"),
    BadInput("gpu-count-not-a-number",
             _beta(FRONTEND.replace("          args: [-m, dynamo.frontend]\n",
                                    "          args: [-m, dynamo.frontend]\n"
                                    "          resources: {limits: {nvidia.com/gpu: lots}}\n")),
             "nvidia.com/gpu"),
]


def _annotated(value: str) -> str:
    """The frontend manifest with one annotation whose YAML text is ``value`` (escapes included)."""
    return _beta(FRONTEND).replace("  name: g\n", f"  name: g\n  annotations:\n    note: {value}\n")


def _nested(levels: int, flow: bool) -> str:
    """A field the CRD keeps verbatim (providerOverride.value), nested ``levels`` deep."""
    if flow:
        value = "        deep: " + "[" * levels + "]" * levels + "\n"
    else:
        value = "".join("        " + "  " * i + f"k{i}:\n" for i in range(levels)) + "        " + "  " * levels + "x\n"
        value = value.replace(f"k{levels - 1}:\n" + "        " + "  " * levels + "x", f"k{levels - 1}: x")
    return _beta(FRONTEND + "    providerOverride:\n      apiVersion: grove.io/v1alpha1\n      value:\n" + value)


def _components(count: int) -> str:
    return _beta("".join(FRONTEND.replace("name: Frontend", f"name: frontend-{i}") for i in range(count)))


# Hostile input (issue 13): text that cannot be stored, parser limits, amplification.
CASES += [
    BadInput("lone-surrogate-escape-in-an-annotation", _annotated('"\\ud800"'), "lone surrogate", parsable=False),
    BadInput("low-surrogate-escape-in-an-annotation", _annotated('"caf\\udfffe"'), "metadata.annotations.note",
             parsable=False),
    BadInput("nul-escape-in-an-annotation", _annotated('"a\\0b"'), "NUL", parsable=False),
    BadInput("nul-escape-in-a-command-argument",
             _beta(FRONTEND.replace("args: [-m, dynamo.frontend]", 'args: [-m, "dynamo.frontend\\x00"]')),
             "spec.components[0].podTemplate.spec.containers[0].args[1]", parsable=False),
    BadInput("lone-surrogate-in-a-key", _beta(FRONTEND).replace("  name: g\n", '  name: g\n  labels: {"\\ud83d": x}\n'),
             "lone surrogate", parsable=False),
    BadInput("flow-nesting-500-levels", _nested(500, flow=True), "nested more than 64 levels", parsable=False),
    BadInput("block-nesting-300-levels", _nested(300, flow=False), "nested more than 64 levels", parsable=False),
    BadInput("integer-of-5000-digits", _beta(FRONTEND.replace("replicas: 1", "replicas: " + "9" * 5000)),
             "too large", parsable=False),
    BadInput("integer-beyond-64-bits", _beta(FRONTEND.replace("replicas: 1", "replicas: " + "9" * 30)),
             "spec.components[0].replicas", parsable=False),
    BadInput("infinite-replicas", _beta(FRONTEND.replace("replicas: 1", "replicas: .inf")),
             "not a finite number", parsable=False),
    BadInput("two-hundred-components", _components(200), "at most 100"),
]

assert len({case.id for case in CASES}) == len(CASES), "case ids must be unique"

TEXT_CASES = [case for case in CASES if case.is_text]
PARSABLE_CASES = [case for case in CASES if case.parsable]
UNPARSABLE_CASES = [case for case in CASES if not case.parsable]


def alias_bomb(levels: int = 6) -> str:
    """A few hundred bytes of YAML whose aliases expand to 10**levels strings, in a field the CRD
    keeps verbatim (providerOverride.value preserves unknown fields)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    value = "\n".join("        " + line for line in lines)
    return _beta(FRONTEND + "    providerOverride:\n      apiVersion: grove.io/v1alpha1\n      value:\n"
                 + value + "\n")
