"""The typed graph spec: what a graph is, independent of the DGD API version.

A spec models what operators reason about (roles, replicas, GPUs, shared memory, image,
command, the Hugging Face token Secret) and keeps every other valid field verbatim in
``extra*`` dictionaries, so that importing a manifest and rendering it again gives the same
object back. ``extra`` holds fields spelled the same in both API versions; ``extra_v1alpha1``
and ``extra_v1beta1`` hold fields only one version knows, re-emitted only in that version."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.dgd.commandline import router_mode, with_router_mode
from core.facts import DEFAULT_ROUTER_MODE, ENGINES, ROUTER_MODE_ENV, ROUTER_MODES, SHM_DEFAULT_SINCE, DynamoVersion

Role = Literal["frontend", "prefill", "decode", "worker", "planner", "epp", "other"]
Engine = Literal["vllm", "sglang", "trtllm", "mocker"]
WORKER_ROLES = ("prefill", "decode", "worker")
# The /dev/shm the Dynamo operator mounts when a component sets no size
# (internal/dynamo/shared_memory.go).
OPERATOR_DEFAULT_SHM = 8 * 2**30
WrittenEmpty = Literal["env", "envFrom", "resources", "container", "pod", "pod_metadata"]

# The most replicas one pool may ask for. Far above any real pool; it catches typos
# (an extra zero) before a cluster tries to schedule them.
MAX_REPLICAS = 512
MAX_GPUS_PER_REPLICA = 64

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
COMPONENT_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$")
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# What an API client can check before sending a size that must not be negative.
# The exponent is whole, as resource.ParseQuantity reads it (the CRD's own pattern also lets
# "1E.5" through, which quantity_bytes and the API server refuse).
QUANTITY_NOT_NEGATIVE = (r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                         r"([eE](\+|-)?[0-9]+))?$")
_QUANTITY_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
}


def quantity_bytes(value: str | int | float) -> float:
    """A Kubernetes quantity in base units (bytes for memory). Raises ValueError."""
    text = str(value).strip()
    if not QUANTITY.match(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 16Gi, 512Mi)")
    match = re.match(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$", text)
    if not match or match.group(2) not in _QUANTITY_SUFFIX:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 16Gi, 512Mi)")
    return float(match.group(1)) * _QUANTITY_SUFFIX[match.group(2)]


def check_shared_memory(value: str) -> str:
    """A /dev/shm size: a Kubernetes quantity, not negative ("0": no shared memory). Raises
    ValueError; QUANTITY_NOT_NEGATIVE says the same to API clients."""
    value = value.strip()
    if quantity_bytes(value) < 0 or value.startswith("-"):
        raise ValueError("shared memory cannot be negative")
    return value


def check_secret_name(value: str) -> str:
    """The name of a Secret: a DNS-1123 subdomain, as the API server requires. Raises ValueError."""
    if len(value) > 253 or not DNS1123_SUBDOMAIN.match(value):
        raise ValueError(f"secret name {value!r} is not a valid Kubernetes name")
    return value


def check_dns_label(value: str, what: str = "name") -> str:
    if len(value) > 63:
        raise ValueError(f"{what} {value!r} is longer than 63 characters")
    if not DNS1123_LABEL.match(value):
        raise ValueError(
            f"{what} {value!r} is not a valid Kubernetes name: use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return value


class Service(BaseModel):
    """One DGD component: the frontend, a worker pool, a planner..."""

    model_config = ConfigDict(extra="forbid")

    name: str
    role: Role
    # No upper bound here: an absurd count is an operational finding (replicas_absurd) that
    # blocks an apply, with its manifest path, rather than a refusal to import.
    replicas: int | None = Field(default=None, ge=0)
    gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS_PER_REPLICA)
    shared_memory: str | None = None  # /dev/shm size; None: operator default (8Gi); "0": none
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    working_dir: str | None = None
    hf_token_secret: str | None = None
    env: list[dict[str, Any]] = Field(default_factory=list)
    scaling_adapter: bool = False
    # Where the main container sits in podTemplate.spec.containers (v1beta1); None when the
    # component has no container named "main" (then image/command/args stay unset).
    main_container_index: int | None = 0
    # Quantities written as YAML integers (gpu: 1, sharedMemorySize: 17179869184) rather than
    # strings: re-emitted as integers while the modelled value is unchanged.
    int_quantities: list[Literal["gpus", "shared_memory"]] = Field(default_factory=list)
    # The quantities as the manifest spelled them ("08", 17179869184, "1.5Gi"): re-emitted
    # verbatim while the modelled value is unchanged, so an import never rewrites them.
    spelled: dict[Literal["gpus", "shared_memory"], str | int] = Field(default_factory=dict)
    # v1alpha1 extraPodSpec.mainContainer.name as written (the operator names the container
    # "main" whatever it says; v1beta1 always spells it "main").
    main_container_name: str | None = None
    # Where the token Secret sat in v1beta1 envFrom: order decides which key wins when two
    # sources define the same variable, so it is kept (None: first).
    hf_token_secret_index: int | None = Field(default=None, ge=0)
    # Modelled fields the manifest wrote as empty ([] or {}): rendered empty again, never
    # dropped. Vocabulary: env, envFrom, resources, container, pod, pod_metadata.
    written_empty: list[WrittenEmpty] = Field(default_factory=list)
    # The v1beta1 podTemplate keys as written ("podTemplate" itself, "metadata", "spec"); None
    # for a spec built here, which always renders podTemplate.spec.
    pod_template_keys: list[Literal["podTemplate", "metadata", "spec"]] | None = None
    container_extra: dict[str, Any] = Field(default_factory=dict)
    pod_extra: dict[str, Any] = Field(default_factory=dict)
    pod_metadata: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    extra_v1alpha1: dict[str, Any] = Field(default_factory=dict)
    extra_v1beta1: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value or len(value) > 63 or not COMPONENT_NAME.match(value):
            raise ValueError(
                f"component name {value!r} is invalid: 1-63 letters, digits or '-', "
                "starting and ending with a letter or digit"
            )
        return value

    @field_validator("shared_memory")
    @classmethod
    def _shm(cls, value: str | None) -> str | None:
        return None if value is None else check_shared_memory(str(value))

    @field_validator("hf_token_secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        return None if value in (None, "") else check_secret_name(value)

    @property
    def is_worker(self) -> bool:
        return self.role in WORKER_ROLES

    @property
    def router_mode(self) -> str | None:
        """A frontend's router mode as its command line or env declares it (None: unset)."""
        return router_mode(self.command, self.args, self.env) if self.role == "frontend" else None

    @property
    def effective_replicas(self) -> int:
        # The defaulting webhook sets 1 when replicas is missing.
        return 1 if self.replicas is None else self.replicas


def _frontend_with_router_mode(service: Service, mode: str) -> Service:
    from core.dgd.commandline import flag_value, tokens

    if mode not in ROUTER_MODES:
        raise ValueError(f"router mode {mode!r} is not one of {', '.join(ROUTER_MODES)}")
    has_env = any(isinstance(e, dict) and e.get("name") == ROUTER_MODE_ENV for e in service.env)
    has_flag = flag_value(tokens(service.command, service.args), "--router-mode") is not None
    if (has_env and not has_flag) or (service.command is None and service.args is None):
        # A frontend run by the image's own entrypoint (no command line to edit), or one that
        # already sets its mode through the env: the env is where the mode goes.
        env = [e for e in service.env if not (isinstance(e, dict) and e.get("name") == ROUTER_MODE_ENV)]
        index = next((i for i, e in enumerate(service.env) if isinstance(e, dict)
                      and e.get("name") == ROUTER_MODE_ENV), len(env))
        env.insert(index, {"name": ROUTER_MODE_ENV, "value": mode})
        return service.model_copy(update={"env": env})
    command, args = with_router_mode(service.command, service.args, mode)
    return service.model_copy(update={"command": command, "args": args})


class GraphSpec(BaseModel):
    """A whole graph: what one DynamoGraphDeployment declares."""

    model_config = ConfigDict(extra="forbid")

    name: str
    # The DGD's metadata.name when it is not the graph's name: a DGD may have dots in its name
    # (a DNS subdomain), a graph may not (its name is in URLs); the graph is then named with
    # dots turned to "-", as the operator names the DGD's Services.
    dgd_name: str | None = None
    namespace: str | None = None
    model: str | None = None  # the served model name, as the frontend lists it
    backend: Engine = "vllm"
    dynamo_version: str
    services: list[Service]
    env: list[dict[str, Any]] = Field(default_factory=list)
    written_empty: list[Literal["env"]] = Field(default_factory=list)  # spec.env(s): [] as written
    metadata_extra: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    extra_v1alpha1: dict[str, Any] = Field(default_factory=dict)
    extra_v1beta1: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "graph name")

    @field_validator("dgd_name")
    @classmethod
    def _dgd_name(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        if len(value) > 253 or not DNS1123_SUBDOMAIN.match(value):
            raise ValueError(f"DynamoGraphDeployment name {value!r} is not a valid Kubernetes name: use lower-case "
                             "letters, digits, '-' and '.', starting and ending with a letter or digit")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        return None if value in (None, "") else check_dns_label(value, "namespace")

    @field_validator("dynamo_version")
    @classmethod
    def _version(cls, value: str) -> str:
        return str(DynamoVersion.parse(value))

    @model_validator(mode="after")
    def _unique_names(self) -> GraphSpec:
        seen: set[str] = set()
        for service in self.services:
            # The operator names child resources <graph>-<lower(component)>: names that differ
            # only by case collide.
            key = service.name.lower()
            if key in seen:
                raise ValueError(f"two services are named {service.name!r} (names must be unique, ignoring case)")
            seen.add(key)
        return self

    @property
    def version(self) -> DynamoVersion:
        return DynamoVersion.parse(self.dynamo_version)

    def service(self, name: str) -> Service:
        for service in self.services:
            if service.name == name:
                return service
        raise KeyError(name)

    def pools(self, role: str) -> list[Service]:
        return [s for s in self.services if s.role == role]

    @property
    def router_mode(self) -> str:
        """How the Frontend routes requests to workers: the first frontend's declared mode,
        else Dynamo's default (round-robin)."""
        declared = next((s.router_mode for s in self.pools("frontend") if s.router_mode), None)
        return declared or DEFAULT_ROUTER_MODE

    def with_router_mode(self, mode: str) -> GraphSpec:
        """A copy whose every frontend runs ``--router-mode mode`` (an explicit edit: only the
        flag's value changes, or the flag is added). Raises ValueError for an unknown mode."""
        services = []
        for service in self.services:
            if service.role == "frontend":
                service = _frontend_with_router_mode(service, mode)
            services.append(service)
        return self.model_copy(update={"services": services})

    def shm_requested_bytes(self, service_name: str) -> int | None:
        """The /dev/shm a service's pods should see: its size, the operator's 8Gi default when
        unset (from SHM_DEFAULT_SINCE, ai-dynamo/dynamo#2616: deploy/operator/internal/dynamo/
        shared_memory.go:28@2a6da14c; older operators sized it from the memory limit, so None),
        0 when disabled; None for a name the spec does not have."""
        service = next((s for s in self.services if s.name == service_name), None)
        if service is None:
            return None
        if service.shared_memory is None:
            return OPERATOR_DEFAULT_SHM if self.version >= SHM_DEFAULT_SINCE else None
        try:
            return int(quantity_bytes(service.shared_memory))
        except ValueError:
            return None

    def total_gpus(self) -> int:
        return sum((s.gpus or 0) * s.effective_replicas for s in self.services)

    @property
    def engine_module(self) -> str:
        return ENGINES[self.backend]["module"]
