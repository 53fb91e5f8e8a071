"""``merge.Updater`` (``merge/update.go``): who owns what after an update or an apply.

* ``update``: every other manager loses the fields this write added or modified (the conflicts,
  forced for a non-apply write) and the fields it removed;
* ``Update``: the writer takes what it added or modified;
* ``Apply``: merge the configuration into the live object, the applier's set becomes the
  configuration's fields, fields it applied last time and not now are pruned unless another
  manager owns them, and a field another manager owns with a different value is a conflict
  unless ``force`` (then that manager loses it).

Objects may be converted between versions: ``Managed`` entries record their version, and the
``convert``/``type_of`` callables give an object and its type in a version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .fieldpath import Path, path_string
from .typed import ABSENT, Comparison, compare, equals, merge, named_fields_are_members, remove_items, to_field_set

Filter = Callable[[set[Path]], set[Path]]


@dataclass
class Managed:
    """A manager's ``VersionedSet``: its fields, the version they are in, and whether applied."""

    fields: set[Path]
    version: str
    applied: bool


@dataclass(frozen=True)
class Conflict:
    manager: Any
    path: Path

    def __str__(self) -> str:
        return f'conflict with "{self.manager}": {path_string(self.path)}'


class ConflictError(Exception):
    def __init__(self, conflicts: list[Conflict]):
        self.conflicts = sorted(conflicts, key=lambda c: (str(c.manager), path_string(c.path)))
        super().__init__(str(self.conflicts[0]) if len(self.conflicts) == 1 else "conflicts")


class Updater:
    def __init__(self, *, type_of: Callable[[str], Any], convert: Callable[[Any, str], Any] | None = None,
                 ignore: Filter | None = None):
        """``ignore``: the fields nobody manages (upstream's ``IgnoreFilter``, here the same in
        every version)."""
        self.type_of = type_of
        self.convert = convert or (lambda obj, _version: obj)
        self.ignore = ignore

    def _filter(self, version: str, fields: set[Path]) -> set[Path]:
        return self.ignore(fields) if self.ignore else fields

    def _compare(self, old: Any, new: Any, version: str) -> Comparison:
        c = compare(self.convert(old, version), self.convert(new, version), self.type_of(version))
        c.removed, c.modified, c.added = (self._filter(version, s) for s in (c.removed, c.modified, c.added))
        return c

    def _update(self, old: Any, new: Any, version: str, managers: dict[Any, Managed], workflow: Any,
                force: bool) -> tuple[dict[Any, Managed], Comparison]:
        versions = {version: self._compare(old, new, version)}
        conflicts: dict[Any, set[Path]] = {}
        removed: dict[Any, set[Path]] = {}
        for manager, entry in managers.items():
            if manager == workflow:
                continue
            if entry.version not in versions:
                versions[entry.version] = self._compare(old, new, entry.version)
            c = versions[entry.version]
            clash = entry.fields & (c.modified | c.added)
            if clash:
                conflicts[manager] = clash
            if c.removed:
                removed[manager] = c.removed
        if conflicts and not force:
            raise ConflictError([Conflict(m, p) for m, paths in conflicts.items() for p in paths])
        for manager, paths in [*conflicts.items(), *removed.items()]:
            managers[manager] = Managed(managers[manager].fields - paths, managers[manager].version,
                                        managers[manager].applied)
        return {m: e for m, e in managers.items() if e.fields}, versions[version]

    def update(self, live: Any, new: Any, version: str, managers: dict[Any, Managed], manager: Any
               ) -> dict[Any, Managed]:
        """``Updater.Update``: a create, replace or patch by ``manager``."""
        managers, c = self._update(live, new, version, dict(managers), manager, True)
        mine = managers.get(manager, Managed(set(), version, False)).fields
        fields = self._filter(version, (mine - c.removed) | c.modified | c.added)
        managers = dict(managers)
        managers.pop(manager, None)
        if fields:
            managers[manager] = Managed(fields, version, False)
        return managers

    def apply(self, live: Any, config: Any, version: str, managers: dict[Any, Managed], manager: Any,
              force: bool) -> tuple[Any, dict[Any, Managed]]:
        """``Updater.Apply``: the merged object (``None`` when nothing changed) and the managers."""
        managers = dict(managers)
        t = self.type_of(version)
        new = merge(live, config, t)
        new = {} if new is ABSENT else new
        last = managers.get(manager)
        managers[manager] = Managed(self._filter(version, to_field_set(config, t)), version, True)
        new = self._prune(new, managers, manager, last)
        managers, _ = self._update(live, new, version, managers, manager, force)
        return (None if equals(live, new) else new), managers

    def _prune(self, merged: Any, managers: dict[Any, Managed], applier: Any, last: Managed | None) -> Any:
        """Remove what ``applier`` applied last time and not now, unless someone owns it."""
        if last is None or not last.fields:
            return merged
        version = last.version
        t = self.type_of(version)
        converted = self.convert(merged, version)
        pruned = _remove(converted, named_fields_are_members(last.fields, t, converted), t)
        pruned = self._add_back_owned(converted, pruned, version, managers)
        pruned = self._add_back_dangling(converted, pruned, last)
        return self.convert(pruned, managers[applier].version)

    def _add_back_owned(self, merged: Any, pruned: Any, pruned_version: str, managers: dict[Any, Managed]) -> Any:
        """``addBackOwnedItems``: what pruning removed but a manager (or the new configuration) owns."""
        by_version: dict[str, set[Path]] = {}
        for entry in managers.values():
            by_version.setdefault(entry.version, set()).update(entry.fields)
        order = ([pruned_version] if pruned_version in by_version else []) + [
            v for v in by_version if v != pruned_version]
        for version in order:
            t = self.type_of(version)
            merged, pruned = self.convert(merged, version), self.convert(pruned, version)
            merged_set = named_fields_are_members(to_field_set(merged, t), t, merged)
            pruned_set = named_fields_are_members(to_field_set(pruned, t), t, pruned)
            owned = named_fields_are_members(by_version[version], t, merged)
            pruned = _remove(merged, merged_set - (pruned_set | owned), t)
        return pruned

    def _add_back_dangling(self, merged: Any, pruned: Any, last: Managed) -> Any:
        """``addBackDanglingItems``: only what the applier owned last time may go; anything else
        pruning took (unowned, or an updater's) comes back."""
        t = self.type_of(last.version)
        pruned = self.convert(pruned, last.version)
        pruned_set = named_fields_are_members(to_field_set(pruned, t), t, pruned)
        merged_set = named_fields_are_members(to_field_set(merged, t), t, merged)
        owned_last = named_fields_are_members(last.fields, t, merged)
        return _remove(merged, (merged_set - pruned_set) & owned_last, t)


def _remove(value: Any, members: set[Path], t: Any) -> Any:
    out = remove_items(value, members, t)
    return {} if out is ABSENT else out
