"""Structured-merge-diff, the library behind server-side apply, rewritten in Python for the emulator
from kubernetes-sigs/structured-merge-diff at commit 15d075473efece0367330fd20a7cc2aad2eeb998
(``typed/`` and ``merge/update.go``). It shares nothing with the product's ownership code.

* :mod:`.schema`: the types of a CRD's ``openAPIV3Schema`` as structured-merge-diff sees them
  (maps with fields, granular or atomic; lists atomic, sets, or maps keyed by
  ``x-kubernetes-list-map-keys``, a missing key taking its schema ``default``; the deduced type
  for what the schema does not describe);
* :mod:`.fieldpath`: path elements, ``Path.String()`` and the FieldsV1 wire format;
* :mod:`.typed`: ``ToFieldSet``, ``Compare``, ``Merge`` and ``RemoveItems``;
* :mod:`.updater`: ``Updater.Update`` and ``Updater.Apply``, with pruning, the add-back of items
  others own, conflicts and ``force``.

A field set is a Python ``set`` of paths (tuples of path elements): the members of upstream's
``fieldpath.Set``.
"""

from .fieldpath import from_fields_v1, path_string, to_fields_v1
from .schema import Deduced, resolve_openapi
from .typed import ABSENT, compare, merge, remove_items, to_field_set
from .updater import Conflict, ConflictError, Managed, Updater

__all__ = ["ABSENT", "Conflict", "ConflictError", "Deduced", "Managed", "Updater", "compare", "from_fields_v1",
           "merge", "path_string", "remove_items", "resolve_openapi", "to_field_set", "to_fields_v1"]
