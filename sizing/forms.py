"""The estimate form: AIConfigurator's inputs, its support matrix as the choices."""

from __future__ import annotations

from django import forms

from core.facts import KNOWN_RELEASES

from . import aic


class EstimateForm(forms.Form):
    model = forms.ChoiceField()
    system = forms.ChoiceField()
    backend = forms.ChoiceField()
    gpus = forms.IntegerField(min_value=1, max_value=4096, initial=8, label="GPUs")
    isl = forms.IntegerField(min_value=1, max_value=1_000_000, initial=4000, label="Input tokens (ISL)")
    osl = forms.IntegerField(min_value=1, max_value=1_000_000, initial=500, label="Output tokens (OSL)")
    ttft = forms.FloatField(min_value=0.001, initial=600, label="TTFT target (ms)")
    itl = forms.FloatField(min_value=0.001, initial=20, label="ITL target (ms)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        matrix = aic.support_matrix()
        self.fields["model"].choices = [(m, m) for m in matrix["models"]]
        self.fields["system"].choices = [(s, s) for s in matrix["systems"]]
        self.fields["backend"].choices = [(b, b) for b in matrix["backends"]]
        self.fields["model"].initial, self.fields["system"].initial = "Qwen/Qwen3-32B", "h200_sxm"
        self.fields["backend"].initial = "vllm"

    def inputs(self) -> aic.Inputs:
        d = self.cleaned_data
        return aic.Inputs(model=d["model"], system=d["system"], total_gpus=d["gpus"], isl=d["isl"], osl=d["osl"],
                          ttft=d["ttft"], tpot=d["itl"], backend=d["backend"])


class GraphForm(forms.Form):
    name = forms.SlugField(max_length=63)
    mode = forms.ChoiceField(choices=[("agg", "agg"), ("disagg", "disagg")])
    rank = forms.IntegerField(min_value=1)
    dynamo_version = forms.ChoiceField(choices=[(v, v) for v in KNOWN_RELEASES], initial=KNOWN_RELEASES[0])


class DgdrForm(forms.Form):
    """Apply the estimate's DynamoGraphDeploymentRequest to a registered cluster (clusters.py)."""

    cluster = forms.ChoiceField(choices=[])
    namespace = forms.SlugField(max_length=63)
    name = forms.SlugField(max_length=63)
    dynamo_version = forms.ChoiceField(choices=[(v, v) for v in KNOWN_RELEASES], initial=KNOWN_RELEASES[0])
    auto_apply = forms.BooleanField(required=False, label="let the operator deploy the DGD it chooses",
                                    help_text="off: adopt it here as a graph, then apply it as any other")

    def __init__(self, *args, clusters=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster"].choices = [(c, c) for c in clusters]


class AdoptForm(forms.Form):
    graph = forms.SlugField(max_length=63, label="as graph")
