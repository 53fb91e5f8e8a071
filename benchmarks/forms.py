"""Forms of the benchmark pages. They only parse input; profiles.resolve validates it, and its
errors come back here by field."""

from __future__ import annotations

from django import forms

from graphs.models import Graph

from .profiles import MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS, PROFILES, ProfileError

PARAM_NAMES = ("input_tokens_mean", "input_tokens_stddev", "output_tokens_mean", "output_tokens_stddev",
               "concurrency", "request_rate", "sweep", "request_count", "duration_s", "max_seconds")


def _int(label: str, **kw) -> forms.IntegerField:
    return forms.IntegerField(label=label, required=False, **kw)


def _float(label: str, **kw) -> forms.FloatField:
    return forms.FloatField(label=label, required=False, **kw)


class ParamsForm(forms.Form):
    # Archived graphs (variants a study tore down) are records, not something to measure again.
    graph = forms.ModelChoiceField(queryset=Graph.objects.filter(archived_at__isnull=True).order_by("name"),
                                   to_field_name="name")
    profile = forms.ChoiceField(choices=[(p.key, p.title) for p in PROFILES.values()], initial="custom",
                                widget=forms.RadioSelect)
    input_tokens_mean = _int("Input tokens (mean)", min_value=1, max_value=MAX_INPUT_TOKENS)
    input_tokens_stddev = _float("Input tokens (spread, stddev)", min_value=0)
    output_tokens_mean = _int("Output tokens (mean)", min_value=1, max_value=MAX_OUTPUT_TOKENS)
    output_tokens_stddev = _float("Output tokens (spread, stddev)", min_value=0)
    concurrency = _int("Concurrency (requests in flight)", min_value=1)
    request_rate = _float("Request rate (requests/s)", min_value=0.001)
    sweep = forms.CharField(label="Concurrency sweep (e.g. 1,2,4,8)", required=False, max_length=100)
    request_count = _int("Request count", min_value=1)
    duration_s = _float("Duration (s)", min_value=1)
    max_seconds = _int("Time bound of the whole run (s)", min_value=1)

    def clean_sweep(self) -> list[int]:
        text = self.cleaned_data.get("sweep") or ""
        try:
            return [int(part) for part in text.replace(" ", ",").split(",") if part]
        except ValueError:
            raise forms.ValidationError("whole numbers separated by commas, like 1,2,4,8") from None

    def params(self) -> dict:
        """The overrides as typed; only the filled-in ones."""
        return {k: self.cleaned_data.get(k) for k in PARAM_NAMES if self.cleaned_data.get(k) not in (None, "", [])}

    def add_profile_errors(self, exc: ProfileError) -> None:
        for field, messages in exc.errors.items():
            self.add_error(field if field in self.fields else None, " ".join(messages))


class StudyForm(ParamsForm):
    arms = forms.CharField(label="Arms (shapes, e.g. agg2 p1d1 p2d1; empty: every shape with the same GPUs)",
                           required=False, max_length=100)
    keep_variants = forms.BooleanField(label="Leave the variant graphs deployed afterwards", required=False)

    def clean_arms(self) -> list[str]:
        return [a for a in (self.cleaned_data.get("arms") or "").replace(",", " ").split() if a]


class RecommendForm(forms.Form):
    ttft_ms = _float("TTFT p90 target (ms)", min_value=0.1, max_value=480_000)
    itl_ms = _float("ITL p90 target (ms)", min_value=0.1, max_value=60_000)
