"""A Dynamo version as every input reads it: one field for the API and one for forms, each in
two kinds, both judged by core.facts alone.

* a **release** (``known=True``): a version this control plane knows (core.facts.known_release),
  for what makes a graph or a DGDR: their images must exist. The API's schema gives the
  pattern of exactly those releases.
* a **version** (``known=False``): any MAJOR.MINOR.PATCH (core.facts.DynamoVersion), for what
  renders or checks against a version (a target of a check may be newer than this control
  plane's list).

Each returns the version as core writes it (``1.6.1``, a leading ``v`` dropped), or None when
left empty where that is allowed."""

from __future__ import annotations

from django import forms
from rest_framework import serializers

from core.facts import KNOWN_RELEASES, LATEST, DynamoVersion, known_release, known_release_pattern

VERSION_PATTERN = r"^v?\d{1,4}\.\d{1,4}\.\d{1,4}$"
VERSION_MESSAGE = f"must be a Dynamo release MAJOR.MINOR.PATCH, e.g. {LATEST}"
RELEASE_MESSAGE = f"is not a known Dynamo release: the known releases are {', '.join(KNOWN_RELEASES)} " \
                  "(or an earlier patch of one)"


# A query parameter: empty is as absent (DRF reads an empty optional query value as not given).
VERSION_OR_EMPTY = f"^(?:{VERSION_PATTERN.removeprefix('^').removesuffix('$')})?$"


def read_version(text: str, *, known: bool) -> str:
    """``text`` as core writes a version; raises ValueError saying what is wrong."""
    return known_release(text) if known else str(DynamoVersion.parse(text))


class DynamoVersionField(serializers.RegexField):
    """The API's Dynamo version: ``known=True`` accepts only known releases (and says which in
    the schema's pattern); otherwise any version."""

    def __init__(self, *, known: bool, **kwargs):
        self.known = known
        kwargs.setdefault("max_length", 20)
        kwargs.setdefault("error_messages", {"invalid": RELEASE_MESSAGE if known else VERSION_MESSAGE})
        pattern = known_release_pattern() if known else VERSION_PATTERN
        if kwargs.get("allow_blank"):
            pattern = f"^(?:{pattern.removeprefix('^').removesuffix('$')})?$"  # empty: as absent
        super().__init__(pattern, **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if value == "":
            return None
        try:
            return read_version(value, known=self.known)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class DynamoVersionFormField(forms.CharField):
    """A form's Dynamo version, typed (with the known releases offered beside it by the page)."""

    def __init__(self, *, known: bool, **kwargs):
        self.known = known
        kwargs.setdefault("max_length", 20)
        super().__init__(**kwargs)

    def clean(self, value):
        value = super().clean(value)
        if not value:
            return None
        try:
            return read_version(value, known=self.known)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
