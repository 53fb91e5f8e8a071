"""The emulator's structured-merge-diff (tests/k8s_emulator/smd) against cases taken from upstream's
own test tables: kubernetes-sigs/structured-merge-diff at commit
15d075473efece0367330fd20a7cc2aad2eeb998, files named per case. Each case is the upstream one
(operations, the object after them, each manager's field set), its schema written as the OpenAPI a
CRD would carry. Where upstream runs a case across versions, the single-version case is used
(the emulator's conversions are tested elsewhere)."""

from __future__ import annotations

import pytest

from tests.k8s_emulator import smd
from tests.k8s_emulator.smd.fieldpath import field, key, set_value

SMD_COMMIT = "15d075473efece0367330fd20a7cc2aad2eeb998"

# merge/key_test.go associativeListParser: a list keyed by name of {name: string, value: numeric}
ASSOCIATIVE = {"type": "object", "properties": {"list": {
    "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
    "items": {"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "number"}}}}}}
# merge/leaf_test.go leafFieldsParser
LEAF = {"type": "object", "properties": {"numeric": {"type": "number"}, "string": {"type": "string"},
                                         "bool": {"type": "boolean"}}}
# merge/set_test.go setFieldsParser: an associative list of strings without keys
SETS = {"type": "object", "properties": {"list": {"type": "array", "x-kubernetes-list-type": "set",
                                                  "items": {"type": "string"}}}}
# merge/default_keys_test.go portListParser: keys port and protocol, protocol defaults to TCP
PORTS = {"type": "object", "properties": {"containerPorts": {
    "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"],
    "items": {"type": "object", "properties": {"port": {"type": "number"},
                                               "protocol": {"type": "string", "default": "TCP"},
                                               "name": {"type": "string"}}}}}}


def P(*parts):
    return tuple(field(p) if isinstance(p, str) else p for p in parts)


def K(**fields):
    return key(fields)


def V(value):
    return set_value(value)


def run(schema, ops):
    """Upstream's TestCase.Test: (object, managers -> fields) after the operations; an Apply that
    expects conflicts must raise exactly those and change nothing."""
    updater = smd.Updater(type_of=lambda _v: schema)
    live, managers = {}, {}
    for op in ops:
        kind, manager, obj = op[:3]
        if kind == "update":
            managers = updater.update(live, obj, "v1", managers, manager)
            live = obj
            continue
        if len(op) > 3:  # expected conflicts
            with pytest.raises(smd.ConflictError) as err:
                updater.apply(live, obj, "v1", managers, manager, False)
            assert {(c.manager, c.path) for c in err.value.conflicts} == set(op[3])
            continue
        new, managers = updater.apply(live, obj, "v1", managers, manager, kind == "force")
        live = live if new is None else new
    return live, {m: e.fields for m, e in managers.items()}


CASES = {
    # merge/multiple_appliers_test.go TestMultipleAppliersSet
    "remove_one": (ASSOCIATIVE, [
        ("apply", "apply-one", {"list": [{"name": "a"}, {"name": "b"}]}),
        ("apply", "apply-two", {"list": [{"name": "c"}]}),
        ("apply", "apply-one", {"list": [{"name": "a"}]}),
    ], {"list": [{"name": "a"}, {"name": "c"}]}, {
        "apply-one": {P("list", K(name="a")), P("list", K(name="a"), "name")},
        "apply-two": {P("list", K(name="c")), P("list", K(name="c"), "name")}}),
    "same_value_no_conflict": (ASSOCIATIVE, [
        ("apply", "apply-one", {"list": [{"name": "a", "value": 0}]}),
        ("apply", "apply-two", {"list": [{"name": "a", "value": 0}]}),
    ], {"list": [{"name": "a", "value": 0}]}, {
        m: {P("list", K(name="a")), P("list", K(name="a"), "name"), P("list", K(name="a"), "value")}
        for m in ("apply-one", "apply-two")}),
    "change_value_yes_conflict": (ASSOCIATIVE, [
        ("apply", "apply-one", {"list": [{"name": "a", "value": 0}]}),
        ("apply", "apply-two", {"list": [{"name": "a", "value": 1}]},
         [("apply-one", P("list", K(name="a"), "value"))]),
    ], {"list": [{"name": "a", "value": 0}]}, {
        "apply-one": {P("list", K(name="a")), P("list", K(name="a"), "name"), P("list", K(name="a"), "value")}}),
    "remove_one_keep_one": (ASSOCIATIVE, [
        ("apply", "apply-one", {"list": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}),
        ("apply", "apply-two", {"list": [{"name": "c"}, {"name": "d"}]}),
        ("apply", "apply-one", {"list": [{"name": "a"}]}),
    ], {"list": [{"name": "a"}, {"name": "c"}, {"name": "d"}]}, {
        "apply-one": {P("list", K(name="a")), P("list", K(name="a"), "name")},
        "apply-two": {P("list", K(name=n)) for n in "cd"} | {P("list", K(name=n), "name") for n in "cd"}}),
    # merge/key_test.go TestUpdateAssociativeLists
    "removing_obsolete_applied_structs": (ASSOCIATIVE, [
        ("apply", "default", {"list": [{"name": "a", "value": 1}]}),
        ("apply", "default", {"list": [{"name": "b", "value": 2}]}),
    ], {"list": [{"name": "b", "value": 2}]}, {
        "default": {P("list", K(name="b")), P("list", K(name="b"), "name"), P("list", K(name="b"), "value")}}),
    # merge/leaf_test.go TestUpdateLeaf
    "apply_update_apply_with_conflict": (LEAF, [
        ("apply", "default", {"numeric": 1, "string": "string"}),
        ("update", "controller", {"numeric": 1, "string": "controller string", "bool": True}),
        ("apply", "default", {"numeric": 2, "string": "user string"}, [("controller", P("string"))]),
        ("force", "default", {"numeric": 2, "string": "user string"}),
    ], {"numeric": 2, "string": "user string", "bool": True}, {
        "default": {P("numeric"), P("string")}, "controller": {P("bool")}}),
    "apply_twice_remove": (LEAF, [
        ("apply", "default", {"numeric": 1, "string": "string", "bool": False}),
        ("apply", "default", {"string": "new string"}),
    ], {"string": "new string"}, {"default": {P("string")}}),
    "update_apply_omits": (LEAF, [
        ("apply", "default", {"numeric": 2}),
        ("update", "controller", {"numeric": 1}),
        ("apply", "default", {}),
    ], {"numeric": 1}, {"controller": {P("numeric")}}),
    "apply_remove_empty_set": (LEAF, [
        ("apply", "default", {"string": "string"}),
        ("apply", "default", {}),
    ], {}, {}),
    # merge/set_test.go TestUpdateSet
    "apply_update_apply_with_overlap": (SETS, [
        ("apply", "default", {"list": ["a", "c"]}),
        ("update", "controller", {"list": ["a", "b", "c", "d"]}),
        ("apply", "default", {"list": ["a", "b", "c"]}),
    ], {"list": ["a", "b", "c", "d"]}, {
        "default": {P("list", V(x)) for x in "abc"}, "controller": {P("list", V(x)) for x in "bd"}}),
    "apply_twice_reorder": (SETS, [
        ("apply", "default", {"list": ["a", "b", "c", "d"]}),
        ("apply", "default", {"list": ["a", "d", "c", "b"]}),
    ], {"list": ["a", "d", "c", "b"]}, {"default": {P("list", V(x)) for x in "abcd"}}),
    "apply_update_apply_reorder": (SETS, [
        ("apply", "default", {"list": ["a", "b", "c", "d"]}),
        ("update", "controller", {"list": ["a", "d", "c", "b"]}),
        ("apply", "default", {"list": ["a", "b", "c", "d"]}),
    ], {"list": ["a", "b", "c", "d"]}, {"default": {P("list", V(x)) for x in "abcd"}}),
    # merge/default_keys_test.go TestDefaultKeysFlat
    "apply_missing_defaulted_key_A": (PORTS, [
        ("apply", "default", {"containerPorts": [{"port": 80}]}),
    ], {"containerPorts": [{"port": 80}]}, {"default": {
        P("containerPorts", K(port=80, protocol="TCP")), P("containerPorts", K(port=80, protocol="TCP"), "port")}}),
    "apply_missing_defaulted_key_B": (PORTS, [
        ("apply", "default", {"containerPorts": [{"port": 80}, {"port": 80, "protocol": "UDP"}]}),
    ], {"containerPorts": [{"port": 80}, {"port": 80, "protocol": "UDP"}]}, {"default": {
        P("containerPorts", K(port=80, protocol="TCP")), P("containerPorts", K(port=80, protocol="TCP"), "port"),
        P("containerPorts", K(port=80, protocol="UDP")), P("containerPorts", K(port=80, protocol="UDP"), "port"),
        P("containerPorts", K(port=80, protocol="UDP"), "protocol")}}),
    "apply_missing_defaulted_key_with_conflict": (PORTS, [
        ("apply", "apply-one", {"containerPorts": [{"port": 80, "protocol": "TCP", "name": "foo"}]}),
        ("apply", "apply-two", {"containerPorts": [{"port": 80, "name": "bar"}]},
         [("apply-one", P("containerPorts", K(port=80, protocol="TCP"), "name"))]),
    ], {"containerPorts": [{"port": 80, "protocol": "TCP", "name": "foo"}]}, {"apply-one": {
        P("containerPorts", K(port=80, protocol="TCP")), *(P("containerPorts", K(port=80, protocol="TCP"), f)
                                                           for f in ("port", "protocol", "name"))}}),
    "apply_missing_undefaulted_defaulted_key": (PORTS, [
        ("apply", "default", {"containerPorts": [{"protocol": "TCP", "name": "A"}]}),
    ], {"containerPorts": [{"protocol": "TCP", "name": "A"}]}, {"default": {
        P("containerPorts", K(protocol="TCP")), P("containerPorts", K(protocol="TCP"), "name"),
        P("containerPorts", K(protocol="TCP"), "protocol")}}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_upstream_case(name):
    schema, ops, want_object, want_managed = CASES[name]
    live, managed = run(schema, ops)
    assert live == want_object
    assert managed == want_managed


def test_fields_v1_round_trips_and_marks_items_that_have_children():
    members = {P("spec", "components", K(name="decode")), P("spec", "components", K(name="decode"), "name"),
               P("spec", "components", K(name="decode"), "replicas"), P("metadata", "labels", "app")}
    wire = smd.to_fields_v1(members)
    assert wire == {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:components": {
        'k:{"name":"decode"}': {".": {}, "f:name": {}, "f:replicas": {}}}}}
    assert smd.from_fields_v1(wire) == members


def test_a_path_prints_as_upstreams_path_string():
    # fieldpath/element.go PathElement.String: keys sorted by name, values as JSON
    assert smd.path_string(P("containerPorts", K(protocol="TCP", port=80), "name")) == \
        '.containerPorts[port=80,protocol="TCP"].name'
    assert smd.path_string(P("list", V("a"))) == '.list[="a"]'
