"""HTML forms. They validate input and hand typed values to the services."""

from __future__ import annotations

from django import forms
from django.conf import settings
from pydantic import ValidationError

from core.catalog import TEMPLATES
from core.errors import ManifestError
from core.facts import ENGINES, KNOWN_RELEASES, LATEST
from core.planner_config import PlannerSettings
from core.pool import POOL_FIELDS, PoolField, PoolFields
from core.spec import check_dns_label

from .archive import built_manifest, is_archive
from .pool_rules import RULES as POOL_RULES
from .pydantic_fields import form_fields
from .version_fields import DynamoVersionFormField


def pool_form_field(field: PoolField) -> forms.Field:
    """The form field of a pool field: Django reads the number or the text, the pool field's
    own check judges it (an integer is required; text may be left blank)."""

    def check(value):
        try:
            field.check(value)
            if value and field.name in POOL_RULES:
                POOL_RULES[field.name](value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    common = {"label": field.label, "initial": field.default, "help_text": field.help_text, "validators": [check]}
    if field.is_integer:
        bounds = {"min": field.minimum, "max": field.maximum}
        return forms.IntegerField(widget=forms.NumberInput({k: v for k, v in bounds.items() if v is not None}),
                                  **common)
    attrs = {} if field.max_length is None else {"maxlength": field.max_length}
    return forms.CharField(required=False, widget=forms.TextInput(attrs), **common)


class TemplateForm(forms.Form):
    template = forms.ChoiceField(choices=[(k, t.title) for k, t in TEMPLATES.items()])
    name = forms.CharField(max_length=63, help_text="Lower-case letters, digits and '-'")
    namespace = forms.CharField(max_length=63, required=False, help_text="Kubernetes namespace (optional)")
    model = forms.CharField(max_length=300, required=False)
    backend = forms.ChoiceField(choices=[(k, e["title"]) for k, e in ENGINES.items()])
    dynamo_version = DynamoVersionFormField(known=True, initial=LATEST,
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
            for field in POOL_FIELDS:
                self.fields[f"{pool}_{field.name}"] = pool_form_field(field)

        self.fields["planner_enabled"] = forms.BooleanField(
            required=False, label="Add Dynamo's Planner",
            help_text="It scales the prefill and decode pools from live load; on the local runtime the control "
                      "plane executes its decisions")
        # Core's PlannerSettings declares each setting once (graphs/pydantic_fields.py).
        self.fields.update(form_fields(PlannerSettings, prefix="planner_"))

    PLANNER_FIELDS = ("planner_enabled", *(f"planner_{name}" for name in PlannerSettings.model_fields))

    # Each load threshold pair: the scale-up one must be above the scale-down one (1.6.1's
    # PlannerConfig._validate_config refuses it for the load target; for the others the pair is a
    # typo the Planner would ignore silently, so the form refuses it for every target).
    THRESHOLD_PAIRS = (("planner_prefill_scale_up_queue_tokens", "planner_prefill_scale_down_queue_tokens"),
                       ("planner_decode_scale_up_kv_rate", "planner_decode_scale_down_kv_rate"))

    def clean_name(self):
        name = self.cleaned_data["name"]
        try:
            check_dns_label(name, "graph name")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        from .models import Graph

        if Graph.objects.filter(name=name).exists():
            raise forms.ValidationError(f"a graph named {name!r} already exists: choose another name")
        return name

    def clean_namespace(self):
        namespace = self.cleaned_data["namespace"]
        try:
            return namespace and check_dns_label(namespace, "namespace")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self):
        data = super().clean()
        if data.get("planner_enabled"):
            for up, down in self.THRESHOLD_PAIRS:
                hi, lo = data.get(up), data.get(down)
                if hi is not None and lo is not None and hi <= lo:
                    self.add_error(up, f"must be above the scale-down threshold ({lo}); the Planner refuses "
                                       "a scale-up threshold at or below it")
        return data

    def planner_settings(self) -> PlannerSettings | None:
        """Raises forms.ValidationError, on the field it is about, for settings 1.6.1's Planner refuses."""
        d = self.cleaned_data
        if not d.get("planner_enabled"):
            return None
        try:
            # Fields left empty take 1.6.1's defaults (the model's).
            return PlannerSettings(**{f.removeprefix("planner_"): d[f] for f in self.PLANNER_FIELDS[1:]
                                      if d.get(f) not in (None, "")})
        except ValidationError as exc:
            err = exc.errors()[0]
            message = err["msg"].removeprefix("Value error, ")
            where = ".".join(str(p) for p in err["loc"])
            named = [f for f in self.PLANNER_FIELDS if f.removeprefix("planner_") in (where or message)]
            field = f"planner_{where}" if where else (named[0] if named else None)
            raise forms.ValidationError({field: message} if field in self.fields
                                        else f"Planner{' ' + where if where else ''}: {message}") from None

    def planner_group(self):
        return [self[f] for f in self.PLANNER_FIELDS]

    def pool(self, name: str) -> PoolFields | None:
        """The pool's fields, or None for a pool the template does not have."""
        if name not in self.pools:
            return None
        return PoolFields(**{f.name: self.cleaned_data[f"{name}_{f.name}"] for f in POOL_FIELDS})

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
    archive_path = forms.CharField(max_length=500, required=False, strip=True,
                                   help_text="For a .tar.gz or .zip of a kustomize directory: the folder to build "
                                             "(default: the archive's one kustomization that nothing else uses)")
    dynamo_version = DynamoVersionFormField(known=True, required=False,
                                            help_text="Target Dynamo release (default: read from the image tags)")
    message = forms.CharField(max_length=500, required=False)
    expected_revision = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def clean(self):
        data = super().clean()
        upload = data.get("upload")
        if upload is not None:
            if upload.size > settings.MAX_MANIFEST_BYTES:
                raise forms.ValidationError(
                    f"the file is {upload.size:,} bytes; the limit is {settings.MAX_MANIFEST_BYTES:,}")
            raw = upload.read()
            if is_archive(raw):
                # A kustomize directory, built as kubectl kustomize builds it (graphs/archive.py).
                try:
                    data["yaml"], data["built_from"] = built_manifest(
                        raw, path=data.get("archive_path") or "", max_bytes=settings.MAX_MANIFEST_BYTES)
                except ManifestError as exc:
                    raise forms.ValidationError(f"{upload.name}: " + "; ".join(
                        f.message + (f" ({f.fix})" if f.fix else "") for f in exc.findings)) from None
                return data
            try:
                data["yaml"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("the file is not UTF-8 text") from None
        if not (data.get("yaml") or "").strip():
            raise forms.ValidationError("paste a manifest or choose a file")
        return data
