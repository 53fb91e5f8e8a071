"""What the API's schema says of its request bodies and query parameters beyond its serializers,
and the query parameters read outside one (``dynamoVersion``)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError

from core.untrusted import INT_MAX

from ..version_fields import VERSION_OR_EMPTY, read_version
from . import serializers as s
from . import template_serializers as t

# A manifest is one YAML mapping (text/yaml, application/x-yaml and text/plain are read too); the
# CRD's schema and the operational checks judge the rest, answering with findings.
MANIFEST_BODY = {"application/yaml": {"type": "object", "description": "A DynamoGraphDeployment manifest: one YAML "
                                      "mapping with apiVersion, kind, metadata and spec."}}
DGD_BODY = {"application/yaml": {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "description": "A DynamoGraphDeployment manifest (either API version), as YAML.",
    "properties": {"apiVersion": {"type": "string", "enum": ["nvidia.com/v1alpha1", "nvidia.com/v1beta1"]},
                   "kind": {"type": "string", "enum": ["DynamoGraphDeployment"]},
                   "metadata": {"type": "object", "required": ["name"],
                                "properties": {"name": {"type": "string", "pattern": t.K8S_NAME, "maxLength": 63}}},
                   "spec": {"type": "object"}}}}


_ARCHIVE = {"type": "string", "format": "binary"}
ARCHIVE_BODIES = {media: {**_ARCHIVE, "description": "A kustomize directory as a .tar.gz (.tar) or .zip archive: "
                          "built with kubectl kustomize (local files only; remote bases are refused)."}
                  for media in ("application/gzip", "application/zip", "application/x-tar")}
ARCHIVE_PATH_PARAMETER = OpenApiParameter(
    "path", str, description="An archive: the folder to build (default: its one kustomization that nothing else "
    "in it uses).")
DYNAMO_VERSION_PARAMETER = OpenApiParameter(
    "dynamoVersion", {"type": "string", "pattern": VERSION_OR_EMPTY},
    description="A Dynamo release, e.g. 1.6.1 (empty: the graph's own)")


def int_parameter(name: str, *, minimum: int = 1, maximum: int = INT_MAX, required: bool = False,
                   description: str = "") -> OpenApiParameter:
    """An integer query parameter with the bounds the server enforces (QueryIntegerField, query_int)."""
    return OpenApiParameter(name, {"type": "integer", "minimum": minimum, "maximum": maximum}, required=required,
                            description=description)


API_VERSION_PARAMETER = OpenApiParameter("apiVersion", {"type": "string", "enum": s.API_VERSION_CHOICES},
                                         description="The DGD API version (empty: the revision's own)")
RENDER_PARAMETERS = [API_VERSION_PARAMETER, int_parameter("revision"), DYNAMO_VERSION_PARAMETER]


def version_param(request) -> str | None:
    value = request.query_params.get("dynamoVersion")
    if not value:  # absent or empty: the graph's own
        return None
    try:
        return read_version(value, known=False)
    except ValueError as exc:
        raise ValidationError({"dynamoVersion": str(exc)}) from None
