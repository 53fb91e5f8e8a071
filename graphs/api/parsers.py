"""Request parsers: YAML bodies (a manifest is posted as text) and bounded JSON."""

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser

from core import untrusted


class ManifestTextParser(BaseParser):
    """Returns the body as text; YAML parsing (with line numbers in errors) happens in the
    service layer. Refuses bodies over MAX_MANIFEST_BYTES before reading them."""

    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.MAX_MANIFEST_BYTES
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise ParseError(f"the manifest is larger than the {limit:,}-byte limit")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError("the manifest is not UTF-8 text") from None


class TextYamlParser(ManifestTextParser):
    media_type = "text/yaml"


class XYamlParser(ManifestTextParser):
    media_type = "application/x-yaml"


class PlainTextParser(ManifestTextParser):
    media_type = "text/plain"


YAML_PARSERS = [ManifestTextParser, TextYamlParser, XYamlParser, PlainTextParser]


class ArchiveParser(BaseParser):
    """A .tar.gz or .zip of a kustomize directory, as bytes (graphs/archive.py unpacks and
    builds it). Refuses bodies over MAX_MANIFEST_BYTES before reading them whole."""

    media_type = "application/gzip"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.MAX_MANIFEST_BYTES
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise ParseError(f"the archive is larger than the {limit:,}-byte limit")
        return bytes(data)


class XGzipParser(ArchiveParser):
    media_type = "application/x-gzip"


class ZipParser(ArchiveParser):
    media_type = "application/zip"


class TarParser(ArchiveParser):
    media_type = "application/x-tar"


ARCHIVE_PARSERS = [ArchiveParser, XGzipParser, ZipParser, TarParser]


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser within core.untrusted's bounds: depth, 64-bit integers, finite
    numbers, storable text. A refusal is a 400 naming the field path, before any view runs."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise ParseError(f"the request body is larger than the {limit:,}-byte limit")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError("the request body is not UTF-8 text") from None
        try:
            return untrusted.load_json(text)
        except untrusted.UntrustedInputError as exc:
            raise ParseError({exc.path or "body": [exc.message]}) from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
