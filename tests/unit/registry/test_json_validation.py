"""The JSON serdes' validators match regexes in linear time (RE2), answer as jsonschema's own did on
ordinary patterns, and refuse a pattern they cannot evaluate by name, when the validator is built."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import jsonschema
import jsonschema._utils
import jsonschema.exceptions
import jsonschema.validators
import pytest
import referencing._core
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from registry.client import FetchedSchema
from registry.json_validation import (
    _KEPT_RESOLUTIONS,
    CircularValueError,
    QuotingError,
    UnevaluablePatternError,
    WorkBudget,
    _message_length,
    json_nodes,
    linear_time,
    validator_class_for,
    within_budget,
)
from registry.serdes import JSONDeserializer, SerializationError, _validate, _validator, frame

# Generous for a loaded, shared 2-core machine (the suite's Spark JVM may be busy beside it); the
# old code takes from tens of seconds (the `$id` search) to longer than the universe (backtracking).
FAST_S = 5.0
EVIL = "^(a+)+$"
HOSTILE = "a" * 5_000 + "!"
DRAFT3 = "http://json-schema.org/draft-03/schema#"
DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT2019 = "https://json-schema.org/draft/2019-09/schema"
DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"


def refusal(schema: Any, value: Any, referenced: list[tuple[str, FetchedSchema]] | None = None) -> str:
    """The message of the refusal of `value`, which must come quickly."""
    validator = _validator(schema, referenced or [])
    started = time.perf_counter()
    with pytest.raises(SerializationError) as refused:
        _validate(validator, value)
    assert time.perf_counter() - started < FAST_S
    return str(refused.value)


@pytest.mark.parametrize("draft", [DRAFT7, DRAFT2019, DRAFT2020, "http://json-schema.org/draft-04/schema#", None])
def test_catastrophic_pattern_refuses_a_hostile_value_quickly(draft: str | None) -> None:
    schema: dict[str, Any] = {"type": "string", "pattern": EVIL}
    if draft:
        schema["$schema"] = draft
    assert refusal(schema, HOSTILE).endswith('at $, pattern "^(a+)+$" is not met')
    _validate(_validator(schema), "a" * 5_000)


@pytest.mark.parametrize("draft", [DRAFT7, DRAFT2019, DRAFT2020])
def test_catastrophic_property_patterns_answer_quickly(draft: str) -> None:
    typed = {"$schema": draft, "type": "object", "patternProperties": {EVIL: {"type": "integer"}}}
    assert 'type "integer" is not met' in refusal(typed, {"a" * 5_000: "x", HOSTILE: 1})
    closed = {"$schema": draft, "type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": False}
    assert refusal(closed, {HOSTILE: 1}).endswith("at $, additionalProperties false is not met")
    names = {"$schema": draft, "type": "object", "propertyNames": {"pattern": EVIL}}
    assert 'pattern "^(a+)+$" is not met' in refusal(names, {HOSTILE: 1})
    started = time.perf_counter()
    _validate(_validator(closed), {"a" * 5_000: 1})
    assert time.perf_counter() - started < FAST_S


@pytest.mark.parametrize("draft", [DRAFT2019, DRAFT2020])
def test_unevaluated_properties_match_patterns_quickly(draft: str) -> None:
    schema = {"$schema": draft, "type": "object", "allOf": [{"patternProperties": {EVIL: {}}}],
              "unevaluatedProperties": False}
    assert refusal(schema, {HOSTILE: 1}).endswith("at $, unevaluatedProperties false is not met")
    _validate(_validator(schema), {"a" * 5_000: 1})


def test_a_subschema_with_its_own_dialect_stays_linear() -> None:
    # jsonschema's own `evolve` would switch to its stock draft-07 class (Python's `re`) here.
    schema = {"type": "object", "properties": {"x": {"$schema": DRAFT7, "pattern": EVIL}}}
    assert "does not match" in refusal(schema, {"x": HOSTILE})


def test_a_referenced_schema_is_linear_too() -> None:
    address = json.dumps({"$schema": DRAFT7, "type": "object", "properties": {"street": {"pattern": EVIL}}})
    person = {"$schema": DRAFT7, "type": "object", "properties": {"home": {"$ref": "address.json"}}}
    referenced = [("address.json", FetchedSchema(address, "JSON"))]
    assert "does not match" in refusal(person, {"home": {"street": HOSTILE}}, referenced)


@pytest.mark.parametrize(("schema", "keyword", "quoted", "reason"), [
    ({"type": "string", "pattern": "^(a)\\1$"}, "pattern", '"^(a)\\\\1$"', "invalid escape sequence: \\1"),
    ({"patternProperties": {"(?=x)": {}}}, "patternProperties", '"(?=x)"', "invalid perl operator: (?="),
    ({"$defs": {"d": {"pattern": "(?<!x)y"}}}, "pattern", '"(?<!x)y"', "RE2) rejects it"),
    ({"properties": {"p": {"$schema": DRAFT7, "items": {"pattern": "a{,3}"}}}}, "pattern", '"a{,3}"', "'{,n}'"),
    ({"if": {"pattern": "[[:alpha:]]"}}, "pattern", '"[[:alpha:]]"', "'[' inside a character class"),
])
def test_unevaluable_patterns_are_refused_by_name_when_the_validator_is_built(
        schema: Any, keyword: str, quoted: str, reason: str) -> None:
    with pytest.raises(SerializationError) as refused:
        _validator(schema)
    message = str(refused.value)
    assert message.startswith(f"JSON Schema {keyword} {quoted} cannot be evaluated: ")
    assert reason in message
    assert "validate=False" in message


def test_an_unevaluable_pattern_in_a_referenced_schema_is_refused_by_name() -> None:
    address = json.dumps({"$schema": DRAFT7, "properties": {"zip": {"pattern": "^(\\d)\\1$"}}})
    with pytest.raises(SerializationError, match=r'^JSON Schema pattern "\^\(\\\\d\)\\\\1\$" cannot be evaluated: .* '
                                                 r'in the referenced schema "address.json"; the serdes match'):
        _validator({"$ref": "address.json"}, [("address.json", FetchedSchema(address, "JSON"))])


def test_a_long_pattern_is_quoted_in_part() -> None:
    with pytest.raises(SerializationError) as refused:
        _validator({"pattern": "(?=x)" + "a" * 10_000})
    assert len(str(refused.value)) < 400


def test_values_a_pattern_cannot_be_matched_against_are_refused_not_passed() -> None:
    validator = _validator({"type": "string", "pattern": "^[a-z\n]+$"})
    _validate(validator, "abc\nd\n")  # `$` before a final line break, as Java (and Python) read it
    inner = _validator({"type": "string", "pattern": "^([a-z\n]+$)"})  # a `$` inside a group: no way in RE2
    _validate(inner, "abc\nd")
    expected = """JSON Schema pattern "^([a-z\\n]+$)" cannot be evaluated: '$' against a string with several line breaks"""
    with pytest.raises(SerializationError, match=re.escape(expected)):
        _validate(inner, "abc\nd\n")
    with pytest.raises(SerializationError, match="a string it is matched against is not valid Unicode"):
        _validate(validator, "ab\ud800")
    names = _validator({"patternProperties": {"^a": {"type": "integer"}}})
    with pytest.raises(SerializationError, match=r'patternProperties "\^a" cannot be evaluated: a property name'):
        _validate(names, {"a\ud800": 1})


def test_a_pattern_reached_only_when_validating_is_refused_then() -> None:
    # `$ref` into a `const`: no subschema position, so not compiled up front; refused, never skipped.
    validator = _validator({"$defs": {"c": {"const": {"pattern": "(?=x)"}}}, "$ref": "#/$defs/c/const"})
    with pytest.raises(SerializationError, match=r'^JSON Schema pattern "\(\?=x\)" cannot be evaluated'):
        _validate(validator, "x")


def test_patterns_have_javas_meaning() -> None:
    # `\p{L}` is Java's (and RE2's); Python's `re` could not compile it, so such schemas were refused.
    letters = _validator({"type": "string", "pattern": "^\\p{L}+$"})
    _validate(letters, "\u00e9t\u00e9")
    # `\d` is ASCII in Java and ECMA-262 (Python's `re` took any Unicode digit).
    with pytest.raises(SerializationError, match="does not match"):
        _validate(_validator({"type": "string", "pattern": "^\\d+$"}), "\u0663")


def test_one_linear_class_per_draft() -> None:
    cls = validator_class_for({"$schema": DRAFT7})
    assert linear_time(cls) is cls
    assert linear_time(jsonschema.Draft7Validator) is cls
    assert validator_class_for({}) is linear_time(jsonschema.Draft202012Validator)
    assert cls({"type": "string"}).evolve(schema={"$schema": DRAFT2019}).__class__ is validator_class_for(
        {"$schema": DRAFT2019})


# Generated ordinary patterns that Python's `re`, Java and RE2 read alike, over ASCII texts: the
# linear-time validators must give jsonschema's own answers.
ATOMS = st.sampled_from(["a", "b", "-", "_", "\\.", ".", "[ab]", "[^a]", "\\d", "\\w", "\\s", "\\S", "(?:a|b)",
                         "(a)", "(b|)", "x"])
QUANTIFIERS = st.sampled_from(["", "", "*", "+", "?", "{2}", "{1,3}", "*?"])


@st.composite
def patterns(draw: st.DrawFn) -> str:
    body = "".join(draw(ATOMS) + draw(QUANTIFIERS) for _ in range(draw(st.integers(1, 4))))
    if draw(st.booleans()):
        body += "|" + draw(ATOMS) + draw(QUANTIFIERS)
    return draw(st.sampled_from(["", "^"])) + body + draw(st.sampled_from(["", "$"]))


TEXTS = st.text(alphabet="ab_-.1 x\n", max_size=10)


def same_answer(schema: Any, value: Any) -> None:
    stock = jsonschema.validators.validator_for(schema)(schema)
    try:
        expected = stock.is_valid(value)
    except re.error:  # not a pattern `re` compiles: nothing to compare with
        assume(False)
    try:
        assert linear_time(type(stock))(schema).is_valid(value) is expected
    except UnevaluablePatternError as exc:
        assert "several line breaks" in exc.reason  # refused, never a different answer
        assume(False)


@settings(max_examples=300, deadline=None)
@given(patterns(), TEXTS)
def test_pattern_answers_as_jsonschema_did(regex: str, text: str) -> None:
    same_answer({"type": "string", "pattern": regex}, text)


@settings(max_examples=200, deadline=None)
@given(patterns(), st.dictionaries(TEXTS, st.integers(0, 1), max_size=3), st.sampled_from([DRAFT7, DRAFT2020]))
def test_property_patterns_answer_as_jsonschema_did(regex: str, value: dict[str, int], draft: str) -> None:
    same_answer({"$schema": draft, "patternProperties": {regex: {"minimum": 1}}, "additionalProperties": False},
                value)


NAMES = st.sampled_from(["a", "b", "ab", "x_1", "aa"])
NAME_PATTERNS = st.sampled_from(["^a", "b$", "^a+$", "x_\\d", "[ab]{2}", "^(a|b)$"])
LEAVES = st.sampled_from([True, False, {}, {"type": "string"}, {"type": "integer"}, {"minLength": 2},
                          {"required": ["a"]}])


def object_schemas(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    lists = st.lists(children, min_size=1, max_size=2)
    return st.fixed_dictionaries({}, optional={
        "properties": st.dictionaries(NAMES, children, max_size=2),
        "patternProperties": st.dictionaries(NAME_PATTERNS, children, max_size=2),
        "additionalProperties": children, "unevaluatedProperties": children,
        "allOf": lists, "anyOf": lists, "oneOf": lists, "if": children, "then": children, "else": children,
        "dependentSchemas": st.dictionaries(NAMES, children, max_size=1)})


SCHEMAS = st.recursive(LEAVES, object_schemas, max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([DRAFT2019, DRAFT2020]), object_schemas(SCHEMAS), SCHEMAS, st.booleans(),
       st.dictionaries(NAMES, st.one_of(st.text(alphabet="ab", max_size=3), st.integers(0, 2)), max_size=4))
def test_unevaluated_properties_answer_as_jsonschema_did(draft: str, schema: dict[str, Any], defined: Any,
                                                         refers: bool, value: dict[str, Any]) -> None:
    root = {"$schema": draft, "$defs": {"d": defined}, **schema}
    if refers:
        root["$ref"] = "#/$defs/d"
    root.setdefault("unevaluatedProperties", False)
    same_answer(root, value)


def test_unique_items_takes_linear_time() -> None:
    # jsonschema compares every pair of items it cannot sort: 20 s for 4,000 objects.
    schema = {"$schema": DRAFT7, "type": "array", "uniqueItems": True}
    _validate(_validator(schema), [{"k": i} for i in range(20_000)])
    assert refusal(schema, [{"k": i} for i in range(20_000)] + [{"k": 0}]).endswith("at $, uniqueItems true is not met")


def test_the_meta_schema_check_takes_linear_time_and_keeps_its_messages() -> None:
    started = time.perf_counter()
    _validator({"$schema": "http://json-schema.org/draft-04/schema#", "enum": [{"k": i} for i in range(20_000)]})
    assert time.perf_counter() - started < FAST_S
    with pytest.raises(SerializationError, match=r"^invalid JSON Schema: .* has non-unique elements"):
        _validator({"$schema": "http://json-schema.org/draft-04/schema#", "enum": [{"k": 1}, {"k": 1}]})
    with pytest.raises(SerializationError, match=r"^invalid JSON Schema: 5 is not valid under any of the given"):
        _validator({"type": 5})


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([0.0, 1.0, 1.5])
                           | st.sampled_from(["", "a", "1"]),
                           lambda children: st.lists(children, max_size=2)
                           | st.dictionaries(st.sampled_from(["a", "b"]), children, max_size=2), max_leaves=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON_VALUES, max_size=5))
def test_unique_items_answers_as_jsonschema_did(value: list[Any]) -> None:
    # Against jsonschema's own equality of each pair: its `uniqueItems` sorts the items and compares
    # neighbours, where `[False]` and `[0]` sort as equal, so `[[False], [0], [False]]` passed as unique.
    repeated = any(jsonschema._utils.equal(one, two) for index, one in enumerate(value) for two in value[index + 1:])
    schema = {"$schema": DRAFT7, "uniqueItems": True}
    assert linear_time(jsonschema.Draft7Validator)(schema).is_valid(value) is not repeated
    if not any(isinstance(item, (list, dict)) for item in value):  # nothing for its sort to confuse
        same_answer(schema, value)


# The work budget. A schema whose `$ref`s fan out: `allOf` of two references to a definition that
# does the same, `depth` levels deep; jsonschema applies 2**depth subschemas to any value (1.8 s at 16
# levels, doubling per level). The timeouts turn the hours the unbounded code took into a failure.

def fan_out(depth: int, draft: str = DRAFT2020, leaf: Any = None) -> dict[str, Any]:
    where = "$defs" if draft in (DRAFT2019, DRAFT2020) else "definitions"
    branching = "extends" if draft == DRAFT3 else "allOf"  # draft 3 has no `allOf`
    defs: dict[str, Any] = {"d0": {"type": "object"} if leaf is None else leaf}
    for level in range(1, depth + 1):
        defs[f"d{level}"] = {branching: [{"$ref": f"#/{where}/d{level - 1}"}] * 2}
    return {"$schema": draft, where: defs, "$ref": f"#/{where}/d{depth}"}


def steps_of(validator: Any, value: Any) -> int:
    """The steps validating `value` takes, which must be valid."""
    with within_budget(value, WorkBudget(base=10**12)) as spending:
        assert jsonschema.exceptions.best_match(validator.iter_errors(value)) is None
    return spending.steps


@pytest.mark.timeout(60)
@pytest.mark.parametrize("draft", [DRAFT2020, DRAFT2019, DRAFT7, "http://json-schema.org/draft-04/schema#"])
def test_a_fan_out_schema_is_refused_within_the_budget(draft: str) -> None:
    schema = fan_out(30, draft)
    assert len(json.dumps(schema)) < 3_000
    message = refusal(schema, {})
    assert message.startswith("JSON Schema validation exceeded its work budget of 50012 steps "
                              "(50000 plus 12 per JSON node, the value having 1)")
    assert "validate=False" in message
    # A larger value earns more steps, in proportion to its nodes.
    assert "work budget of 50072 steps (50000 plus 12 per JSON node, the value having 6)" in refusal(
        schema, {"a": [1, 2, {"b": None}]})


@pytest.mark.timeout(60)
def test_the_budget_fails_closed_where_a_keyword_reads_an_error_as_an_answer() -> None:
    # `not`, `anyOf`, `oneOf`, `if`, `contains` and `unevaluatedProperties` take a subschema's errors
    # for an answer; running out of steps is none, so the value is refused even where a second branch
    # or a `not` would have let it pass. (The values match `d0` everywhere: a mismatch ends an
    # `is_valid` at its first error, before the fan-out.)
    defs = fan_out(30)["$defs"]
    hostile = {"$ref": "#/$defs/d30"}
    for schema in ({"not": hostile}, {"anyOf": [hostile, True]}, {"oneOf": [hostile, False]},
                   {"if": hostile, "then": True, "else": True}, {"not": {"not": hostile}},
                   {"allOf": [{"properties": {"a": True}}], "unevaluatedProperties": hostile},
                   {"type": "array", "contains": hostile}):
        value = [{"a": 1}] if "contains" in schema else {"a": 1, "b": {}}
        with pytest.raises(SerializationError, match="exceeded its work budget of 5000 steps"):
            _validate(_validator({"$schema": DRAFT2020, "$defs": defs, **schema}), value, WorkBudget(5_000, 0))


def test_the_budget_is_per_value() -> None:
    validator = _validator(fan_out(8))
    steps = steps_of(validator, {})
    assert 2 ** 8 < steps < 2 ** 12
    budget = WorkBudget(base=steps, per_node=0)
    for _ in range(3):  # each value starts afresh, refused or not
        _validate(validator, {}, budget)
        with pytest.raises(SerializationError, match=f"work budget of {steps} steps"):
            _validate(_validator(fan_out(9)), {}, budget)


ORDER = {
    "$schema": DRAFT2020, "type": "object", "required": ["id", "lines", "status"],
    "$defs": {
        "money": {"type": "object", "required": ["amount", "currency"], "additionalProperties": False,
                  "properties": {"amount": {"type": "string", "pattern": "^-?\\d+(\\.\\d{1,4})?$"},
                                 "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}},
        "line": {"type": "object", "required": ["sku", "quantity", "price"], "additionalProperties": False,
                 "properties": {"sku": {"type": "string", "pattern": "^[A-Z0-9-]{4,20}$"},
                                "quantity": {"type": "integer", "minimum": 1}, "price": {"$ref": "#/$defs/money"},
                                "discount": {"anyOf": [{"$ref": "#/$defs/money"}, {"type": "null"}]},
                                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}},
    "properties": {"id": {"type": "string"}, "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
                   "status": {"enum": ["new", "paid"]},
                   "payment": {"oneOf": [{"properties": {"method": {"const": "card"}}, "required": ["method"]},
                                         {"properties": {"method": {"const": "iban"}}, "required": ["method"]}]}},
    "if": {"properties": {"status": {"const": "paid"}}}, "then": {"required": ["payment"]},
    "unevaluatedProperties": False}


def order(lines: int) -> dict[str, Any]:
    return {"id": "o-1", "status": "paid", "payment": {"method": "iban"},
            "lines": [{"sku": f"SKU-{n:06d}", "quantity": 1 + n % 5, "price": {"amount": "9.99", "currency": "EUR"},
                       "discount": None if n % 2 else {"amount": "1.00", "currency": "EUR"}, "tags": ["a", "b"]}
                      for n in range(lines)]}


def test_ordinary_schemas_and_large_values_stay_within_the_default_budget() -> None:
    validator = _validator(ORDER)
    # About 1 MB of order lines: more steps than the base alone allows, well within the per-node share.
    large = order(7_200)
    assert len(json.dumps(large)) > 1_000_000
    _validate(validator, large)
    with pytest.raises(SerializationError, match="exceeded its work budget of 50000 steps"):
        _validate(validator, large, WorkBudget(per_node=0))
    assert refusal(ORDER, {**order(100), "status": "lost"}).endswith('at $.status, enum ["new", "paid"] is not met')
    # Ordinary schemas take a step or two per node, far below the default 100.
    assert steps_of(validator, order(40)) < 2 * json_nodes(order(40))


@pytest.mark.timeout(60)
def test_threads_sharing_a_validator_each_have_their_own_budget() -> None:
    validator = _validator(fan_out(11))
    steps = steps_of(validator, {})
    budget = WorkBudget(base=steps, per_node=0)
    refused: list[str] = []

    def validate_repeatedly() -> None:
        for _ in range(6):
            try:
                _validate(validator, {}, budget)
            except SerializationError as exc:
                refused.append(str(exc))

    threads = [threading.Thread(target=validate_repeatedly) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert refused == []  # one counter for all would have run out in the first round


def test_json_nodes() -> None:
    assert json_nodes(None) == 1
    shared = [1, 2]
    assert json_nodes({"a": shared, "b": shared, "c": ["x", {"d": True}]}) == 11
    loop: dict[str, Any] = {"a": [1]}
    loop["a"].append(loop)
    with pytest.raises(CircularValueError):
        json_nodes(loop)


def test_a_value_holding_itself_is_refused_when_counted() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(SerializationError, match=r"^value is not JSON: the value holds itself$"):
        _validate(_validator({"type": "array", "items": {"type": "integer"}}), loop, WorkBudget(base=1, per_node=0))


@pytest.mark.parametrize(("fields", "message"), [
    ({"base": 0}, "WorkBudget.base must be an integer of at least 1, not 0"),
    ({"per_node": -1}, "WorkBudget.per_node must be an integer of at least 0, not -1"),
    ({"base": 1.5}, "WorkBudget.base must be an integer of at least 1, not 1.5"),
])
def test_a_budget_is_whole_steps(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        WorkBudget(**fields)


def test_a_refusal_names_where_and_which_constraint_never_the_value() -> None:
    """A refused record's content (personal data, secrets) must not reach logs through the error."""
    schema = {"type": "object", "properties": {"ssn": {"type": "string", "pattern": "^\\d{3}-\\d{2}-\\d{4}$"},
                                               "tags": {"type": "array", "items": {"enum": ["a", "b"]}}}}
    assert refusal(schema, {"ssn": "SECRET-VALUE"}) == (
        'value does not match the JSON Schema: at $.ssn, pattern "^\\\\d{3}-\\\\d{2}-\\\\d{4}$" is not met')
    message = refusal(schema, {"ssn": "123-45-6789", "tags": ["a", "SECRET-VALUE"]})
    assert message.endswith('at $.tags[1], enum ["a", "b"] is not met') and "SECRET" not in message
    # A long constraint is cut short.
    assert refusal({"enum": list(range(1_000))}, 5_000).endswith("... is not met")


def test_a_draft_3_type_listing_schemas_is_refused_not_raised() -> None:
    # jsonschema's `best_match` looks each of an error's types up by hashing it: `TypeError` through the
    # deserializer, for a draft 3 `type` listing a schema.
    schema = {"$schema": DRAFT3, "properties": {"a": {"type": ["null", {"type": "integer"}]}}}
    _validate(_validator(schema), {"a": 1})
    assert refusal(schema, {"a": "x"}).endswith('at $.a, type "integer" is not met')
    two = {"$schema": DRAFT3, "properties": {**schema["properties"], "b": {"type": "string"}}}
    assert "value does not match the JSON Schema: at $." in refusal(two, {"a": "x", "b": 1})


def test_values_nested_too_deeply_are_refused_cleanly() -> None:
    """Python's recursion limit is a refusal like any other, not a RecursionError escaping the serdes."""
    deep: Any = 0
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(SerializationError, match="nested too deeply"):
        _validate(_validator({"type": "array", "items": {"$ref": "#"}}), deep)
    deserializer = JSONDeserializer(None, '{"type": "array"}')
    with pytest.raises(SerializationError, match="nested too deeply"):
        deserializer(frame(1, b"[" * 200_000 + b"]" * 200_000))


# Work inside one keyword counts against the budget, in proportion to the sizes it compares: each of
# these values takes about one subschema application per JSON node or fewer (what the budget counted
# before), yet seconds to minutes of work inside keywords on larger sizes. Each is refused within
# 50,000 steps, quickly; before, each passed its keyword work uncounted, or failed as an ordinary mismatch.
KEYWORD_WORK = {
    "const of a large array": ({"allOf": [{"const": [0] * 20_000 + [1]}] * 200}, [0] * 20_001),
    "enum of many members": ({"type": "array", "items": {"enum": list(range(5_000))}}, [-1] * 200),
    "uniqueItems on a large array": ({"allOf": [{"uniqueItems": True}] * 100}, list(range(20_000))),
    "pattern defeating RE2's DFA": ({"allOf": [{"pattern": "[ab]*a[ab]{200}c"}] * 20}, "ab" * 50_000),
    "patternProperties: patterns times names": (
        {"patternProperties": {f"^x{i}$": True for i in range(100)}}, {f"k{i}": 0 for i in range(5_000)}),
    "errors quoting a large value": ({"anyOf": [*[{"type": "null"}] * 500, True]}, [0] * 50_000),
    "a subschema of many keywords": ({"type": "array", "items": {f"x-{i}": 0 for i in range(3_000)}}, [0] * 200),
    "properties listing many names": (
        {"type": "array", "items": {"properties": {f"p{i}": True for i in range(3_000)}}}, [{}] * 2_000),
    "contains, applied to each item": ({"contains": {"type": "string"}}, [0] * 60_000),
    "a long $ref": ({"$defs": {"x" * 10_000: True}, "type": "array", "items": {"$ref": "#/$defs/" + "x" * 10_000}},
                    [0] * 20_000),
    # A subschema with an `$id` enters its own resource (a URI joined) and makes its own resolver at each
    # item, so its `$ref` is resolved afresh each time, a URI joined and split again: 25 us an item, for
    # 1.4 steps when only kept resolutions were charged for.
    "a $ref beside an $id, resolved afresh at each item": (
        {"$id": "urn:root", "$defs": {"d": {}}, "type": "array",
         "items": {"$id": "urn:item", "$ref": "urn:root#/$defs/d"}}, [0] * 20_000),
    "a $ref of many pointer segments": (
        {"x": functools.reduce(lambda inner, _: {"a": inner}, range(400), {}), "type": "array",
         "items": {"$ref": "#/x" + "/a" * 400}}, ["s"] * 20_000),
    "multipleOf with large integers": ({"type": "array", "items": {"multipleOf": 3**2_000}}, [3**2_500] * 25_000),
    "items: true, through every item": ({"allOf": [{"items": True}] * 50}, [0] * 100_000),
    "allOf of true subschemas": ({"type": "array", "items": {"allOf": [True] * 5_000}}, [0] * 400),
    "additionalProperties through every name": (
        {"allOf": [{"additionalProperties": True}] * 100}, {f"k{i}": 0 for i in range(20_000)}),
    "unevaluatedProperties through every name": (
        {"$schema": DRAFT2020, "allOf": [{"unevaluatedProperties": True}] * 50}, {f"k{i}": 0 for i in range(20_000)}),
    "errors passing up from deep in the value": (
        {"$defs": {"n": {"type": ["array", "integer"], "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"},
        functools.reduce(lambda inner, _: [inner, *["s"] * 100], range(150), [])),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", KEYWORD_WORK)
def test_work_inside_keywords_is_counted(case: str) -> None:
    schema, value = KEYWORD_WORK[case]
    validator = _validator(schema)
    started = time.perf_counter()
    with pytest.raises(SerializationError, match=r"exceeded its work budget of 50000 steps \(50000 plus 0 per"):
        _validate(validator, value, WorkBudget(base=50_000, per_node=0))
    assert time.perf_counter() - started < FAST_S


def test_patterns_compiled_again_are_charged() -> None:
    # The compiled patterns kept are the 64 used last: `additionalProperties` tries each name against
    # every pattern in turn, so 65 have each compiled again at every name (0.3 ms for a large one).
    value = {f"k{i}": 0 for i in range(200)}
    few = _validator({"patternProperties": {f"^x{i}$": True for i in range(64)}, "additionalProperties": True})
    many = _validator({"patternProperties": {f"^x{i}$": True for i in range(65)}, "additionalProperties": True})
    steps_of(few, value)  # compiles them
    assert steps_of(many, value) > 5 * steps_of(few, value)


def test_a_format_checker_is_charged_by_the_string_it_reads() -> None:
    # The serdes set none (`format` is an annotation); a validator given one pays for what it reads.
    validator = validator_class_for({})({"format": "email"}, format_checker=jsonschema.FormatChecker())
    assert steps_of(validator, "a" * 100_000 + "@b.c") > steps_of(validator, "a@b.c") + 40


def test_unevaluated_items_take_linear_time() -> None:
    # jsonschema looks each index up in a list of the evaluated ones: 2.4 s for 20,000 items, quadratic.
    schema = {"$schema": DRAFT2020, "contains": {"type": "integer"}, "unevaluatedItems": False}
    _validate(_validator(schema), list(range(1_000)))
    assert refusal(schema, [*range(25_000), "x"]).endswith("at $, unevaluatedItems false is not met")


def test_multiple_of_answers_for_numbers_a_float_cannot_hold() -> None:
    # jsonschema divides as floats and let `OverflowError` escape for an integer beyond a float's range.
    _validate(_validator({"multipleOf": 0.5}), 10**400)
    assert refusal({"multipleOf": 0.3}, 10**400 + 1).endswith("at $, multipleOf 0.3 is not met")
    _validate(_validator({"multipleOf": 3}), 3**700)
    assert refusal({"multipleOf": 1.5}, float("inf")).endswith("multipleOf 1.5 is not met")


def error_details(validator: Any, value: Any) -> list[tuple[str, str, list[Any], str]]:
    def details(errors: Any) -> list[Any]:
        return sorted((e.message, e.json_path, [str(p) for p in e.schema_path], repr(e.validator),
                       details(e.context)) for e in errors)
    return details(validator.iter_errors(value))


def same_errors(schema: Any, value: Any, *, best: bool = True) -> None:
    """The linear-time class gives jsonschema's answer and exactly its errors (messages, paths, contexts),
    and the same best match (unless not `best`)."""
    stock = jsonschema.validators.validator_for(schema)(schema)
    ours = linear_time(type(stock))(schema)
    # Within a budget, as the serdes validate (`$ref` resolutions are kept for the value then), and without.
    for budget in (within_budget(value, WorkBudget(base=10**12)), contextlib.nullcontext()):
        with budget:
            assert ours.is_valid(value) is stock.is_valid(value)
            assert error_details(ours, value) == error_details(stock, value)
            mine = jsonschema.exceptions.best_match(ours.iter_errors(value)) if best else None
    theirs = jsonschema.exceptions.best_match(stock.iter_errors(value)) if best else None
    assert (mine is None) is (theirs is None)
    # The budget charges each message by its length, measured without writing it: as long as written.
    with within_budget(value, WorkBudget(base=10**12)):
        errors = list(ours.iter_errors(value))
        measured = [_message_length(error) for error in every_error(errors)]
    assert measured == [len(error.message) for error in every_error(errors)]
    if mine is not None and theirs is not None:
        assert (mine.json_path, mine.validator, mine.message) == (theirs.json_path, theirs.validator, theirs.message)


def every_error(errors: list[Any]) -> Iterator[Any]:
    for error in errors:
        yield error
        yield from every_error(error.context)


ITEM_LEAVES = st.sampled_from([True, False, {}, {"type": "integer"}, {"type": "string"}, {"minimum": 1},
                               {"enum": [1, "a", [1], {"k": 1}, True]}, {"const": [1, True]}, {"const": 1.0},
                               {"multipleOf": 0.5}, {"multipleOf": 2}, {"uniqueItems": True}])


def item_schemas(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    lists = st.lists(children, min_size=1, max_size=3)
    return st.fixed_dictionaries({}, optional={
        "items": children, "prefixItems": lists, "contains": children, "unevaluatedItems": children,
        "allOf": lists, "anyOf": lists, "oneOf": lists, "not": children, "if": children, "then": children,
        "else": children, "uniqueItems": st.booleans(), "enum": st.lists(JSON_VALUES, max_size=3),
        "const": JSON_VALUES})


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([DRAFT2019, DRAFT2020]), item_schemas(st.recursive(ITEM_LEAVES, item_schemas, max_leaves=5)),
       st.lists(JSON_VALUES, max_size=4) | JSON_VALUES)
def test_keywords_give_jsonschemas_answers_and_errors(draft: str, schema: dict[str, Any], value: Any) -> None:
    if draft == DRAFT2019 and "prefixItems" in schema:  # 2019-09 spells it `items: [...]`
        schema["items"] = schema.pop("prefixItems")
    # jsonschema's 2019-09 `unevaluatedItems` fails on a boolean `items` (TypeError): nothing to compare with
    assume(draft == DRAFT2020 or not re.search(r'"items": (true|false)', json.dumps(schema)))
    same_errors({"$schema": draft, **schema}, value)


def test_one_of_and_any_of_report_as_jsonschema_did() -> None:
    branches = [{"type": "object", "required": ["kind"], "properties": {"kind": {"const": f"k{n}"},
                                                                       "size": {"type": "integer"}}}
                for n in range(3)]
    for value in ({"kind": "k1", "size": 1}, {"kind": "k1", "size": "x"}, {"kind": "k9"}, 5, {"size": 1}):
        same_errors({"oneOf": branches}, value)
        same_errors({"anyOf": branches}, value)
    same_errors({"oneOf": [{"type": "integer"}, {"minimum": 0}, True]}, 3)  # valid under each of three


def test_ordinary_schemas_take_few_steps_per_node() -> None:
    """Steps are counted, not timed (registry/README.md has the figures of larger values): a `oneOf` of a
    dozen branches on small items, the heaviest ordinary shape measured, stays below the default 12 a node
    (8.1; 11.1 when a subschema applied was charged twice what it is now)."""
    events = {"$schema": DRAFT2020, "type": "array", "items": {"oneOf": [{"$ref": f"#/$defs/e{n}"} for n in range(12)]},
              "$defs": {f"e{n}": {"type": "object", "required": ["type", "actor"], "additionalProperties": False,
                                  "properties": {"type": {"const": f"event.{n}"}, "count": {"type": "integer"},
                                                 "actor": {"type": "object", "properties": {
                                                     "id": {"type": "string", "pattern": "^u-[0-9]{1,12}$"}}}}}
                        for n in range(12)}}
    value = [{"type": f"event.{n % 12}", "actor": {"id": f"u-{n}"}, "count": n} for n in range(300)]
    assert steps_of(_validator(events), value) < 9 * json_nodes(value) < WorkBudget().per_node * json_nodes(value)
    assert steps_of(_validator(ORDER), order(40)) < 3 * json_nodes(order(40))


def test_a_failing_branch_stops_at_its_first_error() -> None:
    # jsonschema evaluates each failing branch of `oneOf` and `anyOf` whole (here all 1,000 items, eleven
    # times), to report its errors should no branch match; they are gathered only then.
    branches = [{"properties": {"kind": {"const": f"k{n}"}, "items": {"type": "array", "items": {"type": "integer"}}}}
                for n in range(12)]
    value = {"kind": "k11", "items": [0] * 1_000}
    for keyword in ("oneOf", "anyOf"):
        assert steps_of(_validator({keyword: branches}), value) < 3 * json_nodes(value)
        same_errors({keyword: branches}, {**value, "kind": "k12"})


def test_references_to_ids_and_anchors_do_not_search_the_schema_each_time() -> None:
    # jsonschema searched the whole schema for an `$id` or `$anchor` at each `$ref` to one (77 ms an
    # application beside 10,000 definitions): the registry is searched once, when the validator is made.
    filler = {f"f{i}": {"type": "object", "properties": {"x": {"type": "string"}}} for i in range(1_000)}
    for target, ref in (({"$id": "urn:a", "type": "integer"}, "urn:a"), ({"$anchor": "a", "type": "integer"}, "#a")):
        schema = {"$schema": DRAFT2020, "$defs": {"a": target, **filler}, "type": "array", "items": {"$ref": ref}}
        validator = _validator(schema)
        started = time.perf_counter()
        _validate(validator, list(range(4_000)))  # 4,000 searches of 1,000 definitions before
        assert time.perf_counter() - started < FAST_S
        assert refusal(schema, [0, "x"]).endswith('at $[1], type "integer" is not met')


@pytest.mark.parametrize("reference", [{"a": 1}, ["x"], 5, None])
@pytest.mark.parametrize("keyword", ["$ref", "$dynamicRef"])
def test_a_reference_that_is_not_a_string_is_refused(reference: Any, keyword: str) -> None:
    # A `$ref` that is no string raised `AttributeError` or `TypeError` through the deserializer, past
    # consumers catching `SerializationError`. In a referenced schema, now checked against its meta-schema
    # as the schema is, it is refused when the validator is built, naming the reference.
    placements = ({"properties": {"x": {keyword: reference}}},
                  {"$schema": DRAFT2020, "properties": {"x": {keyword: reference}}, "unevaluatedProperties": False})
    for placed in placements:
        with pytest.raises(SerializationError, match=r"""^invalid referenced JSON Schema "lib.json": .* is not of type 'string'$"""):
            _validator({"$ref": "lib.json"}, [("lib.json", FetchedSchema(json.dumps(placed), "JSON"))])
    # Where no meta-schema looks (inside a `const`, which a pointer can lead into), it is refused as
    # unresolvable when it is met.
    for placed in placements:
        validator = _validator({"$ref": "lib.json#/const"},
                               [("lib.json", FetchedSchema(json.dumps({"const": placed}), "JSON"))])
        with pytest.raises(SerializationError, match=r"^JSON Schema reference cannot be resolved: "):
            _validate(validator, {"x": 1})


def test_a_referenced_schema_with_a_malformed_keyword_still_serves_pointers_into_it() -> None:
    # The registry it cannot be searched in is searched no sooner than before: when a `$ref` needs it.
    # (`additionalItems` is no keyword of 2020-12, whose meta-schema checks it, so it passes that check,
    # but `referencing` searches a schema without `$schema` as draft 7, where it must be a schema.)
    for malformed in (5, [1]):
        document = {"$defs": {"n": {"type": "integer"}}, "additionalItems": malformed}
        validator = _validator({"$ref": "lib.json#/$defs/n"}, [("lib.json", FetchedSchema(json.dumps(document), "JSON"))])
        _validate(validator, 5)
        with pytest.raises(SerializationError, match='type "integer" is not met'):
            _validate(validator, "x")


# `$ref` resolutions are kept for the rest of the value (`_validate_reference`), by resolver: a resolver
# carries its base URI and dynamic scope, so `$dynamicRef` and `$recursiveRef` and `$ref`s relative to
# an `$id` resolve as before.
TREE = {"$id": "https://example.com/tree", "$dynamicAnchor": "node", "type": "object",
        "properties": {"data": True, "children": {"type": "array", "items": {"$dynamicRef": "#node"}}}}
STRICT_TREE = {"$schema": DRAFT2020, "$id": "https://example.com/strict-tree", "$dynamicAnchor": "node",
               "$ref": "tree", "unevaluatedProperties": False, "$defs": {"tree": TREE}}
RECURSIVE_TREE = {"$schema": DRAFT2019, "$id": "https://example.com/strict", "$recursiveAnchor": True,
                  "$ref": "tree", "unevaluatedProperties": False, "$defs": {"tree": {
                      "$id": "https://example.com/tree", "$recursiveAnchor": True, "type": "object",
                      "properties": {"data": True, "children": {"type": "array", "items": {"$recursiveRef": "#"}}}}}}
NESTED_IDS = {"$schema": DRAFT2020, "$id": "https://example.com/root", "type": "array", "items": {
    "$id": "item/", "$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {
        "next": {"$ref": "https://example.com/item/#/$defs/n"}, "v": {"$ref": "/leaf"}}}},
    "unevaluatedProperties": False}, "$defs": {"leaf": {"$id": "/leaf", "type": "integer"}}}


@pytest.mark.parametrize("schema", [STRICT_TREE, {**STRICT_TREE["$defs"]["tree"], "$schema": DRAFT2020},
                                    RECURSIVE_TREE, NESTED_IDS], ids=["strict", "tree", "recursive", "ids"])
def test_kept_resolutions_answer_as_jsonschema_did(schema: dict[str, Any]) -> None:
    def tree(depth: int, key: str) -> dict[str, Any]:
        return {"data": depth, key: 1} if depth == 0 else {"data": depth, "children": [tree(depth - 1, key)] * 2}
    for value in (tree(4, "data"), tree(4, "daat"), {"children": [{"children": [5]}]}):
        same_errors(schema, value)
    chain: dict[str, Any] = {"v": 1}
    for _ in range(20):
        chain = {"next": chain, "v": 2}
    for value in ([chain, chain], [chain, {"next": {"v": "x"}}], [{"next": {"w": 1}}]):
        same_errors(NESTED_IDS, value)


def test_a_fan_out_resolves_each_reference_once_per_value(monkeypatch: pytest.MonkeyPatch) -> None:
    # `referencing` walked the pointer of each `$ref` at every application: half the time of a fan-out's step.
    validator = _validator(fan_out(12))
    lookups: list[str] = []
    lookup = referencing._core.Resolver.lookup
    monkeypatch.setattr(referencing._core.Resolver, "lookup", lambda self, ref: lookups.append(ref) or lookup(self, ref))
    _validate(validator, {})
    assert len(lookups) == 13 and len(set(lookups)) == 13
    _validate(validator, {})  # each value resolves afresh
    assert len(lookups) == 26


def test_the_resolutions_kept_per_value_are_bounded() -> None:
    # A subschema with an `$id` makes a new resolver at each application: one resolution kept per item.
    schema = {"$schema": DRAFT2020, "type": "array",
              "items": {"$id": "urn:item", "$ref": "#/$defs/n", "$defs": {"n": {"type": "integer"}}}}
    validator = _validator(schema)
    with within_budget([0] * 10_000, WorkBudget(base=10**12)) as spending:
        assert validator.is_valid([0] * 10_000)
    assert len(spending.resolved) == _KEPT_RESOLUTIONS
    assert not validator.is_valid([0] * 10 + ["x"])


# Messages that quote the value are written when read (`QuotingError`): jsonschema wrote the repr of the
# value at each error, which was 87 % of the 26 s a 30-level fan-out took to refuse `[0,0,...]` of 1 MB.

class Written(list[Any]):
    """An empty JSON array that counts the times its repr is written."""

    def __init__(self) -> None:
        super().__init__()
        self.reprs = 0

    def __repr__(self) -> str:
        self.reprs += 1
        return "[]"


# Leaves that fail on an array at once, each quoting all of it (or all but `prefixItems`) in its message.
QUOTING_LEAVES = {
    "type": (DRAFT2020, {"type": "object"}), "types": (DRAFT2020, {"type": ["object", "string"]}),
    "minItems": (DRAFT2020, {"minItems": 10**6}), "maxItems": (DRAFT2020, {"maxItems": 1}),
    "not": (DRAFT2020, {"not": {}}), "enum": (DRAFT2020, {"enum": [1, "a"]}),
    "anyOf": (DRAFT2020, {"anyOf": [{"type": "null"}, {"type": "string"}]}),
    "oneOf, valid under each": (DRAFT2020, {"oneOf": [{}, True]}), "false": (DRAFT2020, False),
    "uniqueItems": (DRAFT2020, {"uniqueItems": True}), "items: false": (DRAFT2020, {"items": False}),
    "items: false after prefixItems": (DRAFT2020, {"prefixItems": [{}], "items": False}),
    "additionalItems: false": (DRAFT7, {"items": [{}], "additionalItems": False}),
    "draft 4 type": (DRAFT4, {"type": "object"}),
    "draft 3 type": (DRAFT3, {"type": ["object", "null"]}),
    "draft 3 disallow": (DRAFT3, {"disallow": "array"}),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", QUOTING_LEAVES)
def test_errors_quoting_the_densest_value_do_not_write_it_at_each_error(case: str) -> None:
    draft, leaf = QUOTING_LEAVES[case]
    marker = Written()
    value = [marker] * 20_000  # each repr of the value writes 20,000 markers
    message = refusal(fan_out(30, draft, leaf), value)
    assert "exceeded its work budget of 290012 steps (50000 plus 12 per JSON node, the value having 20001)" in message
    # Measured once for the budget (which charges each message by its length, as before), where each of
    # the hundreds of errors wrote it (18 million markers written, 3.2 s, with `maxItems`).
    assert marker.reprs <= len(value)


def test_a_message_quoting_the_value_is_jsonschemas_written_when_read() -> None:
    marker = Written()
    value = [marker] * 1_000
    schema = {"allOf": [{"type": "object"}, {"not": {}}, {"maxItems": 1}]}
    errors = list(validator_class_for(schema)(schema).iter_errors(value))
    assert marker.reprs == 0
    assert all(isinstance(error, QuotingError) for error in errors)
    assert [error.message for error in errors] == [
        error.message for error in jsonschema.Draft202012Validator(schema).iter_errors(value)]
    assert marker.reprs == 2 * 3 * len(value)  # jsonschema's three messages and these
    assert str(errors[0]).startswith("[[], [], [], ") and marker.reprs > 6 * len(value)
    written = marker.reprs
    assert errors[0].message.endswith("[]] is not of type 'object'") and marker.reprs == written  # kept


SIZES = st.integers(0, 3)
QUOTING_SCHEMAS = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["array", "object", "string", "integer", ["integer", "null"], ["array", "object"]]),
    "minItems": SIZES, "maxItems": SIZES, "minLength": SIZES, "maxLength": SIZES, "minProperties": SIZES,
    "maxProperties": SIZES, "not": ITEM_LEAVES, "anyOf": st.lists(ITEM_LEAVES, min_size=1, max_size=3),
    "oneOf": st.lists(ITEM_LEAVES, min_size=1, max_size=3), "enum": st.lists(JSON_VALUES, max_size=3),
    "const": JSON_VALUES, "uniqueItems": st.booleans()})
LISTED_ITEMS = st.fixed_dictionaries({}, optional={  # before 2020-12 (jsonschema fails on `items: true` there)
    "items": st.sampled_from([{}, {"type": "integer"}, [{}], [{"type": "integer"}, {}]]),
    "additionalItems": st.sampled_from([False, True, {"type": "string"}])})
DRAFT_KEYWORDS = {
    DRAFT3: st.tuples(LISTED_ITEMS, st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["array", ["string", {"type": "integer", "name": "int"}], [{"type": "array"}, "null"]]),
        "disallow": st.sampled_from(["string", ["array", "null"], [{"type": "integer"}]])})),
    DRAFT4: st.tuples(LISTED_ITEMS, st.just({})), DRAFT7: st.tuples(LISTED_ITEMS, st.just({})),
    DRAFT2019: st.tuples(LISTED_ITEMS, st.just({})),
    DRAFT2020: st.tuples(st.fixed_dictionaries({}, optional={
        "prefixItems": st.lists(st.sampled_from([{}, {"type": "integer"}]), max_size=2),
        "items": st.sampled_from([False, True, {}, {"type": "integer"}])}), st.just({})),
}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(list(DRAFT_KEYWORDS)).flatmap(
           lambda draft: st.tuples(st.just(draft), QUOTING_SCHEMAS, DRAFT_KEYWORDS[draft])),
       st.lists(JSON_VALUES, max_size=4) | JSON_VALUES | st.text(alphabet="ab", max_size=4))
def test_errors_written_when_read_are_jsonschemas(drafted: tuple[str, dict[str, Any], Any], value: Any) -> None:
    draft, common, (items, own) = drafted
    # jsonschema's `best_match` fails (`TypeError`) on draft 3's schemas among types: not compared there
    same_errors({"$schema": draft, **common, **items, **own}, value, best=not isinstance(own.get("type"), list))
