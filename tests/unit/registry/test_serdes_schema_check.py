"""What a schema from the registry costs the JSON deserializer before any value: its checks (patterns,
meta-schema) are counted within `SCHEMA_CHECK_BUDGET` and done once per schema id, refused or not; a
refusal's message quotes a bounded part of the schema's constraint, however large it is."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import jsonschema.exceptions
import pytest
import referencing.jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

import registry.serdes
from registry.client import FetchedSchema, RegisteredVersion
from registry.json_validation import (
    SCHEMA_CHECK_BUDGET,
    WorkBudget,
    check_schema,
    json_nodes,
    validator_class_for,
    within_budget,
)
from registry.model import Reference
from registry.serdes import (
    _QUOTED,
    JSONDeserializer,
    SerializationError,
    _mismatch,
    _validate,
    _validator,
    frame,
)

DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT2019 = "https://json-schema.org/draft/2019-09/schema"
DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"


class OneSchemaRegistry:
    """A registry client that answers every schema id with one schema text (as a compromised or
    misconfigured registry could), counting the lookups."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.lookups = 0

    def schema_by_id(self, schema_id: int) -> FetchedSchema:
        self.lookups += 1
        return FetchedSchema(self.schema, "JSON")

    def qualified(self, subject: str) -> str:
        return subject


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The schemas `registry.serdes` checks against their meta-schema, in order."""
    checked: list[Any] = []

    def counted(cls: Any, schema: Any) -> None:
        checked.append(schema)
        check_schema(cls, schema)

    monkeypatch.setattr(registry.serdes, "check_schema", counted)
    return checked


@pytest.mark.parametrize(("text", "message"), [
    (json.dumps({"type": 5}), "invalid JSON Schema: 5 is not valid under any of the given schemas"),
    ('{"type": ', "invalid JSON Schema: Expecting value: line 1 column 10 (char 9)"),
    (json.dumps({"pattern": "(?=x)"}), 'JSON Schema pattern "(?=x)" cannot be evaluated'),
])
def test_a_refused_schema_is_checked_once_per_id(checks: list[Any], text: str, message: str) -> None:
    # An id names one schema for good: its refusal is kept, as its validator is. Before, each value
    # checked the schema again (a 1 MB schema failing at its end: 5 s a value).
    client = OneSchemaRegistry(text)
    deserializer = JSONDeserializer(client)  # type: ignore[arg-type]
    for _ in range(3):
        with pytest.raises(SerializationError) as refused:
            deserializer(frame(7, b"{}"))
        assert str(refused.value).startswith(message)
    assert client.lookups == 1
    assert len(checks) <= 1
    with pytest.raises(SerializationError):
        deserializer(frame(8, b"{}"))  # another id is another schema
    assert client.lookups == 2


def test_a_deserializers_own_schema_that_is_not_json_is_refused_as_invalid() -> None:
    with pytest.raises(SerializationError, match=r"^invalid JSON Schema: Expecting ',' delimiter"):
        JSONDeserializer(None, '{"type": "object" "x": 1}')


def test_a_schema_is_checked_once_per_id(checks: list[Any]) -> None:
    client = OneSchemaRegistry(json.dumps({"type": "object"}))
    deserializer = JSONDeserializer(client)  # type: ignore[arg-type]
    for _ in range(3):
        assert deserializer(frame(7, b"{}")) == {}
    assert checks == [{"type": "object"}]


def test_the_checks_of_a_schema_are_within_their_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    properties = {"$schema": DRAFT2020, "properties": {f"p{i}": {"type": "string"} for i in range(50)}}
    _validator(properties)
    monkeypatch.setattr(registry.serdes, "SCHEMA_CHECK_BUDGET", WorkBudget(base=200, per_node=0))
    with pytest.raises(SerializationError) as refused:
        _validator(properties)
    assert str(refused.value) == (
        "JSON Schema not checked: checking it took more than its work budget of 200 steps (200 plus 0 per "
        "JSON node, the schema and the schemas it references having 103); values are refused (validate=False "
        "turns validation off)")
    # The referenced schemas count, their nodes as well as their patterns' compilations.
    monkeypatch.setattr(registry.serdes, "SCHEMA_CHECK_BUDGET", WorkBudget(base=1_000, per_node=0))
    _validator({"$ref": "lib.json"}, [("lib.json", FetchedSchema(json.dumps({"type": "string"}), "JSON"))])
    patterns = {"definitions": {f"p{i}": {"pattern": f"^[b-y]{{500}}{i}$"} for i in range(100)}}  # compiled here first
    with pytest.raises(SerializationError, match=r"having 204\)"):
        _validator({"$ref": "lib.json"}, [("lib.json", FetchedSchema(json.dumps(patterns), "JSON"))])


def meta_schema_steps(schema: Any) -> float:
    """Steps per JSON node of `schema`'s meta-schema check."""
    with within_budget(schema, WorkBudget(base=10**12)) as spending:
        check_schema(validator_class_for(schema), schema)
    return spending.steps / json_nodes(schema)


@pytest.mark.parametrize("draft", [DRAFT7, DRAFT2019, DRAFT2020])
def test_schemas_of_many_small_subschemas_stay_within_the_schema_budget(draft: str) -> None:
    # The costliest ordinary shape measured: the 2019-09 and 2020-12 meta-schemas take 17.6 to 22.5 steps
    # a node of `true` or `{}` subschemas, more than a value's default 12, under half the schema budget's 48.
    for subschema in (True, {}, {"type": "string"}):
        schema = {"$schema": draft, "properties": {f"p{i}": subschema for i in range(300)}}
        assert meta_schema_steps(schema) < SCHEMA_CHECK_BUDGET.per_node / 2
    wide = {"$schema": draft, "properties": {f"p{i}": True for i in range(6_000)}}
    _validator(wide)  # past the base: the per-node share is what lets it through


def test_a_schema_nested_too_deeply_to_check_is_refused_cleanly() -> None:
    deep = functools.reduce(lambda inner, _: {"not": inner}, range(400), {})
    with pytest.raises(SerializationError, match=r"^invalid JSON Schema: nested too deeply to check$"):
        _validator(deep)


def test_a_schema_error_quoting_a_large_part_of_the_schema_is_shortened() -> None:
    with pytest.raises(SerializationError) as refused:
        _validator({"type": {f"k{i}": i for i in range(10_000)}})
    message = str(refused.value)
    assert message.startswith("invalid JSON Schema: {'k0': 0, 'k1': 1")
    assert message.endswith("'k9999': 9999} is not valid under any of the given schemas")
    assert " ... " in message and len(message) < 3 * _QUOTED


class Unreadable:
    """A constraint's member the message must not reach: reading it fails the test."""

    def __str__(self) -> str:
        raise AssertionError("the whole constraint was written out")


def error_with(constraint: Any) -> jsonschema.exceptions.ValidationError:
    return jsonschema.exceptions.ValidationError("message", validator="enum", validator_value=constraint,
                                                 path=["a", 0])


def test_a_refusal_writes_only_the_part_of_the_constraint_it_quotes() -> None:
    # The constraint can be as large as the schema (an `enum` of 100,000 members); `json.dumps` of all of
    # it cost each refused value as much, for the 200 characters quoted.
    for constraint in ([*range(1_000), Unreadable()], {"a": "x" * 10**6, "b": Unreadable()},
                       [[[[list(range(100))]]], Unreadable()]):
        assert _mismatch(error_with(constraint)).endswith("... is not met")
    assert _mismatch(error_with("x" * 10**6)) == f'at $.a[0], enum "{"x" * (_QUOTED - 1)}... is not met'
    enum = {"enum": list(range(200_000))}
    with pytest.raises(SerializationError, match=r'enum \[0, 1, 2, .*\.\.\. is not met$'):
        _validate(_validator(enum), -1)


JSON_CONSTRAINTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=250),
    lambda children: st.lists(children, max_size=60) | st.dictionaries(st.text(max_size=30), children, max_size=8),
    max_leaves=80)


@settings(max_examples=300, deadline=None)
@given(JSON_CONSTRAINTS)
def test_a_refusal_quotes_a_constraint_as_json_dumps_writes_it(constraint: Any) -> None:
    written = json.dumps(constraint, default=str, ensure_ascii=False)
    expected = written if len(written) <= _QUOTED else written[:_QUOTED] + "..."
    assert _mismatch(error_with(constraint)) == f"at $.a[0], enum {expected} is not met"


def test_the_patterns_of_a_schema_are_charged_to_its_check() -> None:
    # A pattern of a few characters can take a large program (0.3 ms to compile): the checks charge each
    # compilation, as values' searches do.
    few = {"$defs": {f"p{i}": {"pattern": f"^x{i}$"} for i in range(100)}}
    large = {"$defs": {f"p{i}": {"pattern": f"^[a-z]{{500}}{i}$"} for i in range(100)}}
    steps = []
    for schema in (few, large):
        with within_budget(schema, WorkBudget(base=10**12)) as spending:
            registry.json_validation.check_patterns(schema, referencing.jsonschema.DRAFT202012)
        steps.append(spending.steps)
    assert steps[1] - steps[0] > 100 * 10  # 1,000 instructions at 2 units each: 15 steps a pattern


def _stack_depth() -> int:
    import sys

    frame, n = sys._getframe(), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


def _with_frames_left(left: int, call: Any) -> Any:
    """`call()` made when only about `left` frames remain below Python's recursion limit."""
    import sys

    if sys.getrecursionlimit() - _stack_depth() > left:
        return _with_frames_left(left, call)
    return call()


def test_a_schema_too_deep_for_a_deep_caller_is_checked_again_from_a_shallow_one() -> None:
    # Whether a schema is "nested too deeply to check" depends on the stack the caller had: refused once
    # deep in an application's stack, its id must not be refused for good.
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        schema = {"type": "object", "properties": {"a": schema}}
    registry_client = OneSchemaRegistry(json.dumps({"$schema": DRAFT7, **schema}))
    deserializer = JSONDeserializer(registry_client)  # type: ignore[arg-type]
    value: Any = "x"
    for _ in range(40):
        value = {"a": value}
    data = frame(1, json.dumps(value).encode())
    with pytest.raises(SerializationError, match="nested too deeply"):
        _with_frames_left(120, lambda: deserializer(data))
    assert deserializer(data) == value
    assert registry_client.lookups == 2


# Referenced schemas are checked as the schema is: against their meta-schema, within the same budget.

def referenced(*documents: Any) -> list[tuple[str, FetchedSchema]]:
    """Referenced schemas named `a.json`, `b.json`, ... (a text as it is, anything else as its JSON)."""
    return [(f"{chr(ord('a') + index)}.json", FetchedSchema(doc if isinstance(doc, str) else json.dumps(doc), "JSON"))
            for index, doc in enumerate(documents)]


@pytest.mark.parametrize(("schema", "documents", "message"), [
    ({"$ref": "a.json"}, [{"type": 5}], '"a.json": 5 is not valid under any of the given schemas'),
    # the draft `$ref`s into it are evaluated in: the schema's, unless it names its own
    ({"$schema": DRAFT4, "$ref": "a.json"}, [{"exclusiveMinimum": 5}], "\"a.json\": 5 is not of type 'boolean'"),
    ({"$ref": "a.json"}, [{"$schema": DRAFT4, "exclusiveMinimum": 5}], "\"a.json\": 5 is not of type 'boolean'"),
    ({"$ref": "a.json"}, [{"$schema": []}], "\"a.json\": [] is not of type 'string'"),
    ({"$ref": "b.json"}, [{"type": "string"}, {"properties": {"p": {"minLength": -1}}}],
     '"b.json": -1 is less than the minimum of 0'),
    ({"$ref": "a.json"}, ['{"type": '], '"a.json": Expecting value: line 1 column 10 (char 9)'),
])
def test_a_referenced_schema_failing_its_meta_schema_is_refused_by_name(schema: Any, documents: list[Any],
                                                                         message: str) -> None:
    # Only its patterns were checked: an invalid one was read as far as a value reached it, and a
    # malformed keyword raised `AttributeError` or `TypeError` through the deserializer.
    with pytest.raises(SerializationError) as refused:
        _validator(schema, referenced(*documents))
    assert str(refused.value) == f"invalid referenced JSON Schema {message}"


def test_referenced_schemas_valid_in_their_draft_are_accepted() -> None:
    # `exclusiveMinimum` is a number from draft 6 on, a boolean beside `minimum` in draft 4
    validator = _validator({"$ref": "a.json"}, referenced({"exclusiveMinimum": 5}))
    with pytest.raises(SerializationError, match='exclusiveMinimum 5 is not met'):
        _validate(validator, 5)
    validator = _validator({"$schema": DRAFT4, "$ref": "a.json"}, referenced({"minimum": 5, "exclusiveMinimum": True}))
    _validate(validator, 6)
    with pytest.raises(SerializationError, match="minimum 5 is not met"):
        _validate(validator, 5)


def test_a_long_reference_name_is_quoted_in_part() -> None:
    name = "x" * 10_000
    with pytest.raises(SerializationError) as refused:
        _validator({"$ref": name}, [(name, FetchedSchema(json.dumps({"type": 5}), "JSON"))])
    assert str(refused.value).startswith(f'invalid referenced JSON Schema "{"x" * _QUOTED}...": 5 is not valid')


def test_the_checks_of_referenced_schemas_are_within_the_schemas_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # Their meta-schema checks are counted with the schema's, over the nodes of all of them.
    wide = {"properties": {f"p{i}": {"type": "string"} for i in range(300)}}
    _validator({"$ref": "a.json"}, referenced(wide))
    monkeypatch.setattr(registry.serdes, "SCHEMA_CHECK_BUDGET", WorkBudget(base=1_000, per_node=0))
    _validator({"$ref": "a.json"}, referenced({"type": "string"}))
    with pytest.raises(SerializationError, match=r"^JSON Schema not checked: .* having 604\)"):
        _validator({"$ref": "a.json"}, referenced(wide))


class ReferencingRegistry(OneSchemaRegistry):
    """Answers every schema id with a schema referencing `lib` version 1 as "lib.json", and that version
    with `library`."""

    def __init__(self, schema: str, library: str) -> None:
        super().__init__(schema)
        self.library = library

    def schema_by_id(self, schema_id: int) -> FetchedSchema:
        self.lookups += 1
        return FetchedSchema(self.schema, "JSON", references=(Reference("lib.json", "lib", 1),), subject="orders-value")

    def version(self, subject: str, version: int, *, qualified: bool = False) -> RegisteredVersion:
        assert (subject, version) == ("lib", 1)
        return RegisteredVersion(subject, version, 2, FetchedSchema(self.library, "JSON"))


def test_a_deserializer_refuses_the_values_of_an_id_whose_referenced_schema_is_invalid(checks: list[Any]) -> None:
    client = ReferencingRegistry(json.dumps({"$ref": "lib.json"}), json.dumps({"required": "id"}))
    deserializer = JSONDeserializer(client)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(SerializationError, match=r"""^invalid referenced JSON Schema "lib.json": 'id' is not of type 'array'$"""):
            deserializer(frame(7, b"{}"))
    assert client.lookups == 1 and checks == [{"$ref": "lib.json"}, {"required": "id"}]  # checked once
    valid = ReferencingRegistry(json.dumps({"$ref": "lib.json"}), json.dumps({"required": ["id"]}))
    assert JSONDeserializer(valid)(frame(7, b'{"id": 1}')) == {"id": 1}  # type: ignore[arg-type]


DRAFT3 = "http://json-schema.org/draft-03/schema#"
SECRET = "4111-1111-1111-1111"


@pytest.mark.parametrize(("schema", "documents", "value"), [
    # draft 3's meta-schema has no `definitions`: what a `$ref` finds there is checked by no meta-schema,
    # and is evaluated in the referrer's draft
    ({"$ref": "a.json#/definitions/card"}, [{"$schema": DRAFT3, "definitions": {"card": {"type": "strin"}}}], SECRET),
    ({"$ref": "a.json#/definitions/card"}, [{"$schema": DRAFT3, "definitions": {"card": {"type": 5}}}], SECRET),
    ({"$ref": "a.json#/definitions/card"}, [{"$schema": DRAFT3, "definitions": {"card": {"properties": 5}}}],
     {"card": SECRET}),
    # a schema without (or with an unknown) `$schema` is checked in the schema's draft, but evaluated in the
    # draft of the schema referring to it: draft 4 iterates `items: true`
    ({"$ref": "a.json"}, [{"$schema": DRAFT4, "properties": {"x": {"$ref": "b.json"}}}, {"items": True}],
     {"x": [SECRET]}),
    ({"$ref": "a.json"}, [{"$schema": DRAFT4, "properties": {"x": {"$ref": "b.json"}}},
                          {"$schema": "urn:unknown", "items": True}], {"x": [SECRET]}),
    # a pointer into a keyword no meta-schema knows, in the schema itself
    ({"$ref": "#/card", "card": {"type": "strin"}}, [], SECRET),
    ({"$ref": "#/card", "card": {"enum": 5}}, [], SECRET),
    ({"$ref": "#/card", "card": {"minimum": "a"}}, [], 5),
    # jsonschema's own: draft 7's `additionalItems` takes the length of `items: true`
    ({"$schema": DRAFT7, "items": True, "additionalItems": False}, [], [SECRET]),
])
def test_a_schema_part_no_meta_schema_checked_refuses_the_value_without_quoting_it(
        schema: Any, documents: list[Any], value: Any) -> None:
    # A keyword holding what its draft does not allow raised `TypeError`, `AttributeError` or
    # jsonschema's `UnknownType` (whose message quotes the value) through the serdes.
    validator = _validator(schema, referenced(*documents))
    with pytest.raises(SerializationError) as refused:
        _validate(validator, value)
    message = str(refused.value)
    assert message.startswith("JSON Schema cannot be evaluated on the value: ")
    assert SECRET not in message and refused.value.__suppress_context__


@pytest.mark.parametrize("schema", [
    {"$ref": "#/nope", "$defs": {"big": {"const": "y" * 10_000}}},  # `referencing` quotes the whole document
    {"$ref": "#/" + "x" * 10_000},
    {"$ref": "urn:" + "x" * 10_000},
])
def test_an_unresolvable_reference_is_refused_with_a_shortened_message(schema: Any) -> None:
    validator = _validator(schema)
    with pytest.raises(SerializationError) as refused:
        _validate(validator, 1)
    message = str(refused.value)
    assert message.startswith("JSON Schema reference cannot be resolved: ")
    assert len(message) <= len("JSON Schema reference cannot be resolved: ") + 2 * _QUOTED + len(" ... ")
    assert refused.value.__suppress_context__  # the cause, which says it all, is not chained


def test_the_referenced_schemas_nodes_count_however_early_the_schemas_own_check_runs_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The nodes are counted when the base runs out: that happened in the schema's own check, before the
    # referenced schemas were read, and they were checked on the schema's nodes' steps alone.
    monkeypatch.setattr(registry.serdes, "SCHEMA_CHECK_BUDGET", WorkBudget(base=100, per_node=48))
    small = {"$ref": "a.json", "properties": {f"p{i}": {"type": "string"} for i in range(10)}}
    large = {"properties": {f"p{i}": {"type": "string"} for i in range(300)}}
    _validator(small, referenced(large))
    # and the refusal counts them all
    monkeypatch.setattr(registry.serdes, "SCHEMA_CHECK_BUDGET", WorkBudget(base=100, per_node=1))
    with pytest.raises(SerializationError, match=r"having 625\)"):
        _validator(small, referenced(large))


def test_an_integer_too_long_to_write_is_refused_as_not_json() -> None:
    # jsonschema's message quotes it, and `repr` refuses past 4,300 digits: `ValueError` went through the
    # serializer (a deserializer never meets one: `json.loads` refuses it)
    with pytest.raises(SerializationError, match=r"^JSON Schema cannot be evaluated on the value: ValueError \(.*"
                                                 r"or the value is not JSON\); the value is refused$"):
        _validate(_validator({"type": "string"}), 10**5000)


@pytest.mark.parametrize("pattern", ["(" * 10_000 + "a", "a" * 10_000 + ")"])
def test_a_pattern_re2_refuses_is_quoted_in_part_with_re2s_reason(pattern: str) -> None:
    # RE2's reason quotes the part of the pattern it stopped at (`missing ): (((...`): all of it here
    for schema, referenced_documents in (({"pattern": pattern}, []), ({"$ref": "a.json"}, [{"pattern": pattern}])):
        with pytest.raises(SerializationError) as refused:
            _validator(schema, referenced(*referenced_documents))
        message = str(refused.value)
        assert "cannot be evaluated: the linear-time engine (RE2) rejects it: " in message
        assert len(message) < 4 * _QUOTED + 200, len(message)
