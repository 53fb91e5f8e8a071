"""HTML forms. They validate input and hand typed values to the services."""

from __future__ import annotations

from django import forms
from django.conf import settings
from pydantic import ValidationError

from core.catalog import TEMPLATES
from core.facts import KNOWN_RELEASES, LATEST, DynamoVersion
from core.planner import TARGETS, PlannerSettings
from core.spec import MAX_GPUS_PER_REPLICA, MAX_REPLICAS, quantity_bytes


class TemplateForm(forms.Form):
    template = forms.ChoiceField(choices=[(k, t.title) for k, t in TEMPLATES.items()])
    name = forms.CharField(max_length=63, help_text="Lower-case letters, digits and '-'")
    namespace = forms.CharField(max_length=63, required=False, help_text="Kubernetes namespace (optional)")
    model = forms.CharField(max_length=300, required=False)
    backend = forms.ChoiceField(choices=[("vllm", "vLLM"), ("sglang", "SGLang"), ("trtllm", "TensorRT-LLM"),
                                         ("mocker", "Mocker (no GPU)")])
    dynamo_version = forms.CharField(max_length=20, initial=LATEST,
                                     widget=forms.TextInput(attrs={"list": "dynamo-releases"}))
    description = forms.CharField(max_length=500, required=False)
    router_mode = forms.ChoiceField(
        choices=[("round-robin", "Round-robin (Dynamo's default)"),
                 ("kv", "KV-aware: to the worker holding the prefix"), ("random", "Random"),
                 ("power-of-two", "Power of two choices"), ("least-loaded", "Least loaded")],
        initial="round-robin", required=False, label="Router", help_text="The Frontend's --router-mode")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The fields follow the template's pools: an aggregated template has one pool (its
        # fields are named decode_*), and asks nothing about a prefill pool it does not have.
        key = (self.data.get("template") if self.is_bound else None) or self.initial.get("template")
        tpl = TEMPLATES.get(key) or TEMPLATES["vllm-disagg"]
        self.pools = ("prefill", "decode") if tpl.disaggregated else ("decode",)
        for pool in self.pools:
            self.fields[f"{pool}_replicas"] = forms.IntegerField(min_value=0, max_value=MAX_REPLICAS, initial=1,
                                                                 label="Replicas")
            self.fields[f"{pool}_gpus"] = forms.IntegerField(min_value=0, max_value=MAX_GPUS_PER_REPLICA, initial=1,
                                                             label="GPUs per replica")
            self.fields[f"{pool}_shared_memory"] = forms.CharField(max_length=20, initial="16Gi", required=False,
                                                                   label="Shared memory (/dev/shm)")
            self.fields[f"{pool}_image"] = forms.CharField(max_length=300, required=False, label="Image",
                                                           help_text="Default: NVIDIA's runtime image of the release")
            self.fields[f"{pool}_engine_args"] = forms.CharField(max_length=2000, required=False,
                                                                 label="Engine arguments")
            self.fields[f"{pool}_hf_token_secret"] = forms.CharField(max_length=253, initial="hf-token-secret",
                                                                     required=False, label="HF token Secret")

        self.fields["planner_enabled"] = forms.BooleanField(
            required=False, label="Add Dynamo's Planner",
            help_text="It scales the prefill and decode pools from live load; on the local runtime the control "
                      "plane executes its decisions")
        self.fields["planner_optimization_target"] = forms.ChoiceField(
            choices=[(t, t) for t in TARGETS], required=False, initial="throughput", label="Optimization target",
            help_text="sla scales for the TTFT/ITL targets; the others react to queue depth and KV-cache load")
        self.fields["planner_ttft_ms"] = forms.FloatField(min_value=0.001, required=False, initial=500.0,
                                                          label="TTFT target (ms)")
        self.fields["planner_itl_ms"] = forms.FloatField(min_value=0.001, required=False, initial=50.0,
                                                         label="ITL target (ms)")
        self.fields["planner_adjustment_interval_seconds"] = forms.IntegerField(
            min_value=1, max_value=86400, required=False, initial=5, label="Adjustment interval (s)",
            help_text="How often it decides (the throughput loop for sla, the load loop otherwise)")
        self.fields["planner_min_replicas"] = forms.IntegerField(
            min_value=0, max_value=MAX_REPLICAS, required=False, initial=1, label="Minimum replicas per pool")
        self.fields["planner_max_gpu_budget"] = forms.IntegerField(
            min_value=-1, max_value=100000, required=False, initial=8, label="GPU budget", help_text="-1: none")
        # The load target's thresholds (1.6.1 needs all four for it; the others ignore them).
        self.fields["planner_prefill_scale_up_queue_tokens"] = forms.IntegerField(
            min_value=0, required=False, label="Prefill: scale up above (queued tokens)", help_text="target load")
        self.fields["planner_prefill_scale_down_queue_tokens"] = forms.IntegerField(
            min_value=0, required=False, label="Prefill: scale down below (queued tokens)", help_text="target load")
        self.fields["planner_decode_scale_up_kv_rate"] = forms.FloatField(
            min_value=0, max_value=1, required=False, label="Decode: scale up above (KV-cache use, 0-1)",
            help_text="target load")
        self.fields["planner_decode_scale_down_kv_rate"] = forms.FloatField(
            min_value=0, max_value=1, required=False, label="Decode: scale down below (KV-cache use, 0-1)",
            help_text="target load")

    PLANNER_FIELDS = ("planner_enabled", "planner_optimization_target", "planner_ttft_ms", "planner_itl_ms",
                      "planner_adjustment_interval_seconds", "planner_min_replicas", "planner_max_gpu_budget",
                      "planner_prefill_scale_up_queue_tokens", "planner_prefill_scale_down_queue_tokens",
                      "planner_decode_scale_up_kv_rate", "planner_decode_scale_down_kv_rate")

    def planner_settings(self) -> PlannerSettings | None:
        """Raises ValueError (pydantic's, in words) for settings 1.6.1's Planner refuses."""
        d = self.cleaned_data
        if not d.get("planner_enabled"):
            return None
        try:
            # Fields left empty take 1.6.1's defaults (the model's).
            return PlannerSettings(**{f.removeprefix("planner_"): d[f] for f in self.PLANNER_FIELDS[1:]
                                      if d.get(f) not in (None, "")})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ValueError(f"Planner{' ' + where if where else ''}: "
                             f"{err['msg'].removeprefix('Value error, ')}") from None

    def planner_group(self):
        return [self[f] for f in self.PLANNER_FIELDS]

    def clean_dynamo_version(self):
        try:
            return str(DynamoVersion.parse(self.cleaned_data["dynamo_version"]))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self):
        data = super().clean()
        for pool in self.pools:
            size = data.get(f"{pool}_shared_memory")
            if size:
                try:
                    quantity_bytes(size)
                except ValueError as exc:
                    self.add_error(f"{pool}_shared_memory", str(exc))
        return data

    def pool(self, name: str):
        """The pool's fields, or None for a pool the template does not have."""
        from core.catalog import PoolFields

        if name not in self.pools:
            return None
        d = self.cleaned_data
        return PoolFields(replicas=d[f"{name}_replicas"], gpus=d[f"{name}_gpus"],
                          shared_memory=d.get(f"{name}_shared_memory") or "", image=d.get(f"{name}_image") or "",
                          engine_args=d.get(f"{name}_engine_args") or "",
                          hf_token_secret=d.get(f"{name}_hf_token_secret") or "")

    releases = KNOWN_RELEASES

    def graph_fields(self):
        return [self[n] for n in ("name", "namespace", "model", "backend", "dynamo_version", "router_mode",
                                  "description")]

    def pool_groups(self):
        return [(p, [self[f] for f in self.fields if f.startswith(p + "_") and not f.startswith("planner_")])
                for p in self.pools]


class ManifestForm(forms.Form):
    yaml = forms.CharField(required=False, strip=False,
                           widget=forms.Textarea(attrs={"rows": 30, "spellcheck": "false"}))
    upload = forms.FileField(required=False)
    dynamo_version = forms.CharField(max_length=20, required=False,
                                     help_text="Target Dynamo release (default: read from the image tags)")
    message = forms.CharField(max_length=500, required=False)
    expected_revision = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def clean_dynamo_version(self):
        value = self.cleaned_data.get("dynamo_version")
        if not value:
            return None
        try:
            return str(DynamoVersion.parse(value))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self):
        data = super().clean()
        upload = data.get("upload")
        if upload is not None:
            if upload.size > settings.MAX_MANIFEST_BYTES:
                raise forms.ValidationError(
                    f"the file is {upload.size:,} bytes; the limit is {settings.MAX_MANIFEST_BYTES:,}")
            raw = upload.read()
            try:
                data["yaml"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("the file is not UTF-8 text") from None
        if not (data.get("yaml") or "").strip():
            raise forms.ValidationError("paste a manifest or choose a file")
        return data
