"""The JSON serdes' validators resolve references exactly as plain jsonschema does, in every draft kgov
supports (4, 6, 7, 2019-09, 2020-12): `$ref`s inside resources of different `$id`s (absolute, relative,
URNs, nested), anchors (`$anchor`, and `$id: "#name"` before 2019-09), `$dynamicRef` / `$recursiveRef`,
refs into referenced registry schemas, the same `$ref` text meaning another target in another resource,
and recursion. kgov keeps a `$ref`'s resolution for the rest of a value (`_validate_reference`, by
resolver), makes validators without attrs' `__init__` (`_evolve`, falling back to it when jsonschema's
fields are not the ones it knows) and keeps a subschema's resolver when it has no `$id`: a resolution
kept under too coarse a key would silently accept invalid data. Each example is validated by
`registry.serdes._validator` within a budget (as the serdes validate), without one, and through the
fallback construction, against jsonschema's stock class on the same schema and registry."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import attrs
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import pytest
import referencing
import referencing.exceptions
import referencing.jsonschema
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import registry.json_validation
from registry.client import FetchedSchema
from registry.json_validation import WorkBudget, within_budget
from registry.serdes import _validator

DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT6 = "http://json-schema.org/draft-06/schema#"
DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT2019 = "https://json-schema.org/draft/2019-09/schema"
DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"
DRAFTS = [DRAFT4, DRAFT6, DRAFT7, DRAFT2019, DRAFT2020]
MODERN = (DRAFT2019, DRAFT2020)

# Reference texts every resource below can resolve, most meaning another target in each resource: its
# own `t` definition, its own anchor `t`, itself, and relative file names that are the referenced
# registry schema "one.json" from the root (no `$id`: base URI "") but an embedded resource from inside
# https://ex.com/a/ and https://ex.com/b/.
LEAF_REFS = ["#/{defs}/t", "#t", "one.json#/{defs}/t", "one.json#t", "urn:ex:three#t",
             "https://ex.com/b/one.json#/{defs}/t", "two.json#t"]
BODY_REFS = ["one.json", "urn:ex:three", "#", "#/{defs}/u", "one.json#/{defs}/u", "two.json",
             "https://ex.com/a/one.json#/{defs}/u"]

LEAVES = [{"type": "integer"}, {"type": "string"}, {"type": "array"}, {"type": "object"}, {"minimum": 3},
          {"maxLength": 2}, {"enum": [1, "ab", None]}, {"type": ["integer", "null"]}, {}, {"not": {}}]

KEYS = st.sampled_from(["a", "b", "c"])
SCALARS = st.integers(0, 5) | st.sampled_from(["", "ab", "abc"]) | st.none()
VALUES = st.recursive(SCALARS, lambda children: st.dictionaries(KEYS, children, min_size=1) | st.lists(children, max_size=3),
                      max_leaves=12)


@st.composite
def objects(draw: st.DrawFn, depth: int = 4) -> dict[str, Any]:
    """A value shaped like the schemas: "a" for a leaf, "b" mostly an object of the same shape (where
    "b" leads into another resource), "c" anything."""
    value: dict[str, Any] = {"a": draw(SCALARS | st.lists(SCALARS, max_size=2))}
    if depth:
        value["b"] = draw(SCALARS) if draw(st.integers(0, 3)) == 3 else draw(objects(depth - 1))
    if draw(st.booleans()):
        value["c"] = draw(VALUES)
    return value


def spelled(ref: str, draft: str) -> str:
    return ref.format(defs="$defs" if draft in MODERN else "definitions")


@st.composite
def leaf_refs(draw: st.DrawFn, draft: str) -> dict[str, Any]:
    """A `$ref` to a leaf definition, with sibling keywords now and then (applied since 2019-09,
    ignored before)."""
    schema = {"$ref": spelled(draw(st.sampled_from(LEAF_REFS)), draft)}
    if draw(st.booleans()):
        schema.update(draw(st.sampled_from(LEAVES)))
    return schema


@st.composite
def recurring_refs(draw: st.DrawFn, draft: str) -> dict[str, Any]:
    """A reference that can recur: to a resource, a body, or the dynamic anchor."""
    if draft == DRAFT2020 and draw(st.integers(0, 3)) == 0:
        return {"$dynamicRef": "#node"}
    if draft == DRAFT2019 and draw(st.integers(0, 3)) == 0:
        return {"$recursiveRef": "#"}
    return {"$ref": spelled(draw(st.sampled_from(BODY_REFS)), draft)}


@st.composite
def bodies(draw: st.DrawFn, draft: str, depth: int = 0) -> Any:
    """A subschema: leaves and `$ref`s to the leaf definitions anywhere; `$ref`s that can recur only
    below `items` or `properties`, so that each turn of a cycle goes one level into the value and every
    validation ends."""
    choice = draw(st.sampled_from(SHAPES if depth < 3 else SHAPES[:2]))
    if choice == "leaf":
        return dict(draw(st.sampled_from(LEAVES)))
    if choice == "$ref":
        return draw(leaf_refs(draft))
    if choice in ("items", "properties"):
        def child() -> Any:
            return draw(recurring_refs(draft) if draw(st.booleans()) else bodies(draft, depth + 1))
        return {"type": "array", "items": child()} if choice == "items" else \
            {"type": "object", "properties": {key: child() for key in draw(st.sets(KEYS, min_size=1))}}
    branches = draw(st.lists(bodies(draft, depth + 1), min_size=1, max_size=3))
    schema: dict[str, Any] = {"not": branches[0]} if choice == "not" else {choice: branches}
    if draft in MODERN and draw(st.integers(0, 3)) == 0:
        # a subschema now and then: jsonschema evaluates it whole on each name it refuses
        schema["unevaluatedProperties"] = False if draw(st.booleans()) else draw(bodies(draft, 3))
    return schema


SHAPES = ["$ref", "leaf", "$ref", "items", "properties", "properties", "allOf", "anyOf", "oneOf", "not"]


@st.composite
def resources(draw: st.DrawFn, draft: str, resource_id: str | None, *, nested: dict[str, Any] | None = None,
              dynamic: bool = False) -> dict[str, Any]:
    """A schema resource of `draft`: its `t` definition (a leaf, also its anchor `t`) and `u` (a body),
    the `nested` resources among its definitions or one of them where it reads "c"."""
    defs = "$defs" if draft in MODERN else "definitions"
    leaf: dict[str, Any] = dict(draw(st.sampled_from(LEAVES)))
    if draft in MODERN:
        leaf["$anchor"] = "t"
    else:
        leaf["id" if draft == DRAFT4 else "$id"] = "#t"
    # Every resource reads "a" through a reference to a leaf (most mean its own), "b" through one that
    # can lead into another resource, "c" as it likes: so that one value meets the same reference text
    # in several resources.
    schema: dict[str, Any] = {defs: {"t": leaf, "u": draw(bodies(draft))}, "properties": {
        "a": draw(leaf_refs(draft)), "b": draw(recurring_refs(draft)), "c": draw(bodies(draft, 1))}}
    if resource_id is not None:
        schema["id" if draft == DRAFT4 else "$id"] = resource_id
    if dynamic and draft == DRAFT2020:
        schema["$dynamicAnchor"] = "node"
    if dynamic and draft == DRAFT2019:
        schema["$recursiveAnchor"] = True
    in_place = draw(st.booleans())
    for name, resource in (nested or {}).items():
        if in_place:  # applied where it is, not through a `$ref`
            schema["properties"]["c"] = resource
            in_place = False
        else:
            schema[defs][name] = resource
    return schema


@st.composite
def documents(draw: st.DrawFn, draft: str) -> tuple[dict[str, Any], list[tuple[str, FetchedSchema]]]:
    """(root schema, referenced registry schemas): the root without `$id`; inside it https://ex.com/a/one.json
    holding https://ex.com/a/two.json and https://ex.com/b/one.json (written relative to it), which holds
    https://ex.com/b/two.json, and a URN resource; the registry schemas "one.json" and "two.json", each
    referring to the other by name. Every `$ref` resolves from every resource; a 2020-12
    `"$dynamicRef": "#node"` does not in a resource without `"$dynamicAnchor": "node"` (it resolves as a
    `$ref` first), on which jsonschema raises when it reaches it, and kgov must raise too: its `anyOf`
    and `oneOf` leave a failing branch at its first error only when every reference resolves
    (`dynamic_ref_failure`)."""
    two = draw(resources(draft, "two.json"))
    inner = draw(resources(draft, "../b/one.json", nested={"two": two}, dynamic=draw(st.booleans())))
    outer = draw(resources(draft, "https://ex.com/a/one.json", dynamic=draw(st.booleans()),
                           nested={"inner": inner, "two": draw(resources(draft, "two.json"))}))
    urn = draw(resources(draft, "urn:ex:three"))
    root = draw(resources(draft, None, nested={"outer": outer, "urn": urn}, dynamic=True))
    root["$schema"] = draft
    libs = []
    for name in ("one.json", "two.json"):
        lib = draw(resources(draft, None, dynamic=draw(st.booleans())))
        lib["$schema"] = draft
        lib.setdefault("$defs" if draft in MODERN else "definitions", {})["two" if name == "one.json" else "one"] = {
            "$ref": "two.json" if name == "one.json" else "one.json"}
        libs.append((name, FetchedSchema(json.dumps(lib), "JSON")))
    return root, libs


def stock_validator(schema: Any, referenced: list[tuple[str, FetchedSchema]]) -> Any:
    """jsonschema's own class for `schema`, its registry holding the referenced schemas as the serdes name them."""
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(
        (name, referencing.Resource.from_contents(json.loads(doc.schema),
                                                  default_specification=referencing.jsonschema.DRAFT7))
        for name, doc in referenced)
    return jsonschema.validators.validator_for(schema)(schema, registry=registry)


def outcome(validator: Any, value: Any) -> Any:
    """What validating `value` answers: validity, every error (message, paths, keyword, sub-errors) and
    the error the serdes report (`best_match`), or the exception it raises."""
    def details(errors: Any) -> list[Any]:
        return sorted((e.message, e.json_path, [str(p) for p in e.schema_path], repr(e.validator),
                       details(e.context)) for e in errors)
    try:
        best = jsonschema.exceptions.best_match(validator.iter_errors(value))
        return (validator.is_valid(value), details(validator.iter_errors(value)),
                None if best is None else (best.json_path, best.validator, best.message))
    except referencing.exceptions.Unresolvable as exc:
        return "unresolvable", str(exc)
    except RecursionError:
        return "recursion"


@contextlib.contextmanager
def constructed_by_init() -> Iterator[None]:
    """`_evolve` as it is when jsonschema's fields are not the ones it sets itself: through `__init__`."""
    classes = list(registry.json_validation._LINEAR.values())
    saved = {cls: cls._DIRECT_FIELDS for cls in classes}
    try:
        for cls in classes:
            cls._DIRECT_FIELDS = False
        yield
    finally:
        for cls, direct in saved.items():
            cls._DIRECT_FIELDS = direct


def same_as_jsonschema(schema: Any, values: list[Any], referenced: list[tuple[str, FetchedSchema]] = ()) -> None:
    referenced = list(referenced)
    stock = stock_validator(schema, referenced)
    ours = _validator(schema, referenced)
    for value in values:
        expected = outcome(stock, value)
        with within_budget(value, WorkBudget(base=10**9)):
            assert outcome(ours, value) == expected, (schema, value)
        assert outcome(ours, value) == expected, (schema, value)
        with constructed_by_init(), within_budget(value, WorkBudget(base=10**9)):
            assert outcome(ours, value) == expected, (schema, value)


def plain_resource(resource_id: str | None = None) -> dict[str, Any]:
    """A 2020-12 resource as `resources` draws it with every choice its first: `t` an integer (its
    anchor `t`), "a" and "c" through `#/$defs/t`, "b" through `$dynamicRef: "#node"`."""
    schema: dict[str, Any] = {"$defs": {"t": {"type": "integer", "$anchor": "t"}, "u": {"$ref": "#/$defs/t"}},
                              "properties": {"a": {"$ref": "#/$defs/t"}, "b": {"$dynamicRef": "#node"},
                                             "c": {"$ref": "#/$defs/t"}}}
    if resource_id is not None:
        schema["$id"] = resource_id
    return schema


def dynamic_ref_failure() -> tuple[dict[str, Any], list[tuple[str, FetchedSchema]], list[Any]]:
    """The example the property test found at 1,500 examples (schema, referenced schemas, values). The
    registry schema "one.json" has no `$dynamicAnchor`, so its `$dynamicRef: "#node"` cannot be resolved
    (2020-12: it first resolves as a `$ref`, and one.json has no anchor "node"). It sits in the first
    branch of an `anyOf` after `b`, whose "" fails; jsonschema evaluates that branch whole and raises,
    kgov left it at its first error and answered (the second branch matches) without resolving it."""
    inner = plain_resource("../b/one.json")
    inner["$defs"]["two"] = plain_resource("two.json")
    outer = plain_resource("https://ex.com/a/one.json")
    outer["$defs"].update(inner=inner, two=plain_resource("two.json"))
    root = plain_resource()
    root["$defs"].update(outer=outer, urn=plain_resource("urn:ex:three"))
    root["properties"]["b"] = {"$ref": "one.json"}
    root.update({"$dynamicAnchor": "node", "$schema": DRAFT2020})
    one = {"$defs": {"t": {"type": "integer", "$anchor": "t"}, "u": {"$ref": "#/$defs/t"}, "two": {"$ref": "two.json"}},
           "properties": {"a": {"$ref": "#/$defs/t"}, "b": {"$ref": "one.json"}, "c": {
               "anyOf": [{"type": "object", "properties": {"b": {"type": "integer"}, "a": {"$dynamicRef": "#node"}}},
                         {"type": "object"}], "unevaluatedProperties": False}}, "$schema": DRAFT2020}
    two = plain_resource()
    two["$defs"]["one"] = {"$ref": "one.json"}
    two["$schema"] = DRAFT2020
    referenced = [("one.json", FetchedSchema(json.dumps(one), "JSON")), ("two.json", FetchedSchema(json.dumps(two), "JSON"))]
    values = [{"a": 0, "b": {"a": 0, "b": {"a": 0, "b": {"a": 0, "b": {"a": 0}}}}},
              {"a": 0, "b": {"a": None, "b": {"a": 0, "b": {"a": 0, "b": {"a": 0}}, "c": {"a": 0, "b": ""}}}}]
    return root, referenced, values


class Drawn:
    """Stands for `st.data()` in an `@example`: gives its draws in turn (again for each draft)."""

    def __init__(self, *draws: Any) -> None:
        self.draws = draws
        self.count = 0

    def draw(self, strategy: Any, label: Any = None) -> Any:
        self.count += 1
        return self.draws[(self.count - 1) % len(self.draws)]


FOUND = dynamic_ref_failure()


@pytest.mark.parametrize("draft", DRAFTS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
@example(data=Drawn(FOUND[:2], FOUND[2]))
def test_references_resolve_as_jsonschema_resolves_them(draft: str, data: st.DataObject) -> None:
    schema, referenced = data.draw(documents(draft))
    values = data.draw(st.lists(objects(), min_size=1, max_size=4))
    if schema["$schema"] == draft:  # else an `@example` of another draft, checked under its own
        same_as_jsonschema(schema, values, referenced)


def test_an_unresolvable_reference_in_a_failing_branch_raises_as_in_jsonschema() -> None:
    schema, referenced, values = dynamic_ref_failure()
    stock = stock_validator(schema, referenced)
    assert outcome(stock, values[0])[0] is True
    assert outcome(stock, values[1])[0] == "unresolvable"
    same_as_jsonschema(schema, values, referenced)
    # The same branch where nothing else fails: jsonschema raises rather than answer `valid`, and so does kgov.
    value = {"a": 0, "b": {"a": 0, "b": {"a": 0, "c": {"a": 0, "b": ""}}}}
    assert outcome(stock, value)[0] == "unresolvable"
    same_as_jsonschema(schema, [value], referenced)


NESTED = {"$schema": DRAFT2020, "$id": "https://ex.com/root.json", "$defs": {"t": {"type": "integer"}},
          "properties": {"a": {"$id": "inner.json", "$defs": {"t": {"type": "string"}}, "$ref": "#/$defs/t"},
                         "b": {"$ref": "#/$defs/t"}}}


def test_the_fast_construction_makes_what_init_makes() -> None:
    # `_evolve` sets the fields itself, skipping attrs' `__init__`: each field as `__init__` would set it.
    validator = _validator(NESTED)
    inner = validator._resolver.in_subresource(referencing.jsonschema.DRAFT202012.create_resource(
        NESTED["properties"]["a"]))
    for changes in ({"schema": NESTED["properties"]["b"]}, {"schema": NESTED["properties"]["a"], "_resolver": inner}):
        fast = validator.evolve(**changes)
        with constructed_by_init():
            made = validator.evolve(**changes)
        assert type(fast) is type(made)
        assert not hasattr(fast, "_validators") and hasattr(made, "_validators")  # it went through `__init__`
        for field in attrs.fields(type(made)):
            if field.init:
                assert getattr(fast, field.name) is getattr(made, field.name), field.name
    same_as_jsonschema(NESTED, [{"a": "x", "b": 1}, {"a": 1, "b": 1}, {"a": "x", "b": "x"}])


def test_validators_are_made_through_init_when_jsonschemas_fields_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    # A jsonschema whose validator classes hold another field than those `_evolve` sets itself.
    monkeypatch.setattr(registry.json_validation, "_DIRECT", [*registry.json_validation._DIRECT, ("extra", "_extra")])
    cls = registry.json_validation.linear_time(jsonschema.validators.extend(jsonschema.Draft202012Validator, {}))
    assert cls._DIRECT_FIELDS is False
    validator = cls(NESTED, _resolver=_validator(NESTED)._resolver)
    with within_budget({}, WorkBudget(base=10**9)):
        assert hasattr(validator.evolve(schema={"type": "string"}), "_validators")
        assert validator.is_valid({"a": "x", "b": 1})
        assert not validator.is_valid({"a": 1, "b": 1})
        assert not validator.is_valid({"a": "x", "b": "x"})


def same_text_elsewhere(draft: str) -> dict[str, Any]:
    """"#/<defs>/t" in the root (an integer), in a resource reached by `$ref` and in one applied in
    place (strings there): one text, two targets, met in one value."""
    defs, key = ("$defs" if draft in MODERN else "definitions"), ("id" if draft == DRAFT4 else "$id")

    def resource(uri: str) -> dict[str, Any]:
        return {key: uri, defs: {"t": {"type": "string"}}, "properties": {"a": {"$ref": f"#/{defs}/t"}}}
    return {"$schema": draft, defs: {"t": {"type": "integer"}, "x": resource("urn:ex:x")},
            "properties": {"a": {"$ref": f"#/{defs}/t"}, "b": {"$ref": "urn:ex:x"}, "c": resource("urn:ex:y")}}


@pytest.mark.parametrize("draft", DRAFTS)
def test_one_reference_text_meaning_two_targets_in_one_value(draft: str) -> None:
    schema = same_text_elsewhere(draft)
    values = [{"a": 1, "b": {"a": "s"}, "c": {"a": "s"}}, {"a": 1, "b": {"a": 1}}, {"a": 1, "c": {"a": 1}},
              {"b": {"a": "s"}, "a": 1}, {"c": {"a": 2}, "b": {"a": 2}, "a": "s"}]
    same_as_jsonschema(schema, values)
    assert [_validator(schema).is_valid(value) for value in values] == [True, False, False, True, False]


def branch_then(reference: str, keyword: str = "anyOf", **defs: Any) -> dict[str, Any]:
    """`keyword` of a branch that fails on "b" first and then reaches `reference` on "a", and a branch
    any object matches."""
    first = {"properties": {"b": {"type": "integer"}, "a": {"$ref": reference}}}
    return {"$schema": DRAFT2020, keyword: [first, {"type": "object"}], "x": {"$ref": "#/$defs/gone"},
            "$defs": {"t": {"type": "integer"}, **defs}}


@pytest.mark.parametrize("keyword", ["anyOf", "oneOf"])
def test_a_failing_branch_is_left_at_its_first_error_only_where_every_reference_resolves(keyword: str) -> None:
    value = {"b": "", "a": 0}
    # "#/x" is in no keyword: found only by following the reference there, which leads nowhere.
    for reference in ("#/$defs/gone", "#gone", "other.json", "#/x"):
        schema = branch_then(reference, keyword)
        assert outcome(stock_validator(schema, []), value)[0] == "unresolvable"
        assert not registry.json_validation._references_resolve(_validator(schema))
        same_as_jsonschema(schema, [value, {"b": 1, "a": 0}, {"b": 1, "a": "s"}, 5])
    # All resolving, a branch is left at its first error; one that cannot resolve, where no value
    # leads, and each branch is evaluated whole: the same answers, in more steps.
    steps = {}
    for gone in ({"type": "string"}, {"$ref": "#/nowhere"}):
        schema = branch_then("#/$defs/t", keyword, gone=gone)
        validator = _validator(schema)
        same_as_jsonschema(schema, [value, {"b": 1, "a": 0}])
        with within_budget(value) as spending:
            assert validator.is_valid(value) is True
        steps[registry.json_validation._references_resolve(validator)] = spending.steps
    assert steps[True] < steps[False]


def test_the_references_of_ordinary_schemas_and_the_meta_schemas_resolve() -> None:
    # Every validator the serdes make of a schema whose references resolve keeps the shorter way.
    for draft in DRAFTS:
        assert registry.json_validation._references_resolve(_validator(same_text_elsewhere(draft)))
        meta = registry.json_validation._meta_validator(registry.json_validation.validator_class_for({"$schema": draft}))
        assert registry.json_validation._references_resolve(meta)
    schema, referenced, _ = dynamic_ref_failure()
    assert registry.json_validation._references_resolve(_validator(schema, referenced)) is False
    # A reference that is no string, where only a reference leads (no meta-schema looks in `const`).
    malformed = {"$ref": "#/const", "const": {"$ref": 5}}
    assert not registry.json_validation._references_resolve(_validator(malformed))
    assert outcome(_validator(malformed), 1)[0] == "unresolvable"  # (jsonschema: AttributeError)


@pytest.mark.parametrize("draft", MODERN)
def test_unevaluated_properties_evaluate_a_refused_name_whole_as_jsonschema(draft: str) -> None:
    # jsonschema lists a name once per error of its subschema, and raises on a reference after the first.
    schema = {"$schema": draft, "unevaluatedProperties": {"minimum": 3, "maximum": -5}}
    same_as_jsonschema(schema, [{"a": 0}, {"a": 4, "b": -9}, {"a": "s"}])
    assert [error.message for error in _validator(schema).iter_errors({"a": 0})] == [
        "Unevaluated properties are not valid under the given schema ('a', 'a' were unevaluated and invalid)"]
    broken = {"$schema": draft, "unevaluatedProperties": {"type": "integer", "$ref": "#/$defs/gone"}}
    assert outcome(stock_validator(broken, []), {"a": "s"})[0] == "unresolvable"
    same_as_jsonschema(broken, [{"a": "s"}, {}])


@pytest.mark.parametrize("order", [1, -1])
def test_a_dynamic_reference_target_is_read_from_the_references_base_uri(order: int) -> None:
    # one.json's `$dynamicRef` reaches two.json's `$dynamicAnchor` (two.json, evaluated first, is in the
    # dynamic scope), which has no `$id`: `referencing` reads it from one.json's URI, where its
    # "#/$defs/only" leads nowhere. jsonschema raises on it in the failing first branch of its `anyOf`;
    # read from two.json's own URI (as the check first did, meeting one.json first) it resolves.
    one = {"$schema": DRAFT2020, "$dynamicAnchor": "node", "properties": {"n": {"$dynamicRef": "#node"}}}
    two = {"$schema": DRAFT2020, "$dynamicAnchor": "node", "$defs": {"only": {"type": "integer"}},
           "properties": {"b": {"$ref": "one.json"}},
           "anyOf": [{"properties": {"x": {"type": "integer"}, "y": {"$ref": "#/$defs/only"}}}, {"type": "object"}]}
    referenced = [("one.json", FetchedSchema(json.dumps(one), "JSON")), ("two.json", FetchedSchema(json.dumps(two), "JSON"))]
    schema = {"$schema": DRAFT2020, "$ref": "two.json"}
    values = [{"b": {"n": {"x": "s", "y": 0}}}, {"x": "s", "y": 0}, {"b": {"n": {"x": 1, "y": 0}}}]
    # (the third reaches it whatever the evaluation: "x" matches)
    assert [outcome(stock_validator(schema, referenced[::order]), value)[0] for value in values] == [
        "unresolvable", True, "unresolvable"]
    assert not registry.json_validation._references_resolve(_validator(schema, referenced[::order]))
    same_as_jsonschema(schema, values, referenced[::order])


def test_the_check_gives_up_past_its_bound_and_branches_are_evaluated_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = branch_then("#/$defs/t")
    assert registry.json_validation._references_resolve(_validator(schema))
    monkeypatch.setattr(registry.json_validation, "_WALKED_FREE", 0)
    monkeypatch.setattr(registry.json_validation, "_WALKED", 0)
    assert not registry.json_validation._references_resolve(_validator(schema))
    same_as_jsonschema(schema, [{"b": "", "a": 0}, {"b": 1, "a": "s"}, {"b": 1, "a": 0}])
