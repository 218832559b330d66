"""Cost of the JSON serdes' linear-time regexes (`registry.json_validation`) against jsonschema's own,
and of the work budget.

Validates one 1 KiB record with five ordinary `pattern`s and a `patternProperties` (closed by
`additionalProperties: false`), the way `registry.serdes._validate` does (`best_match` over
`iter_errors`), with jsonschema's stock draft-07 class (Python's `re`: what the serdes used before)
and with `linear_time` of it (RE2 through `json_model.compile_pattern`). Prints microseconds per
validation (best of `--rounds` rounds of `--count` validations) and their ratio; then `^(a+)+$`
against `a` * n + "!": the stock class for small n (each `a` doubles its time), the linear one for
n = 5,000 and 100,000.

Then the work budget (`within_budget`, as `serdes._validate` applies it): the linear class with and
without it on the record and on a 2020-12 order of 40 lines (`--count` / 50 validations a round) (`$ref`s, `anyOf`, `oneOf`, `if`,
`unevaluatedProperties`); the steps per JSON node that real-world-like schemas take on large values
(against the default of 100 per node); and how long a 30-level fan-out schema takes to be refused.
Run against a tree without the budget (`cd /work/main && .venv/bin/python <this file>`), it prints
the linear figures only: the old side of the comparison.

Then how long hostile schemas take to be refused under the default budget, on 1 MB values. With
`--per-step`, only the microseconds a step of 25 hostile shapes costs (the budget's worth at worst);
with `--ordinary`, only the record, a 40-line order and 20 GeoJSON polygons within the budget (for
comparing trees: `PYTHONPATH=<other tree> ... --ordinary`).

    PYTHONPATH=. .venv/bin/python bench/registry_json_validation_bench.py [--count 2000] [--rounds 5]
        [--ordinary | --per-step]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import jsonschema
import jsonschema.exceptions
import referencing.jsonschema

from registry import json_validation, serdes
from registry.json_validation import linear_time


def made(cls: Any, schema: Any) -> Any:
    """The linear-time validator of `schema` as the serdes make it (`validator_with`: its references
    proven to resolve, which lets `anyOf` and `oneOf` leave a failing branch at its first error)."""
    made_with = getattr(json_validation, "validator_with", None)
    return linear_time(cls)(schema) if made_with is None else made_with(linear_time(cls), schema, [])

within_budget = getattr(json_validation, "within_budget", None)  # None in a tree without the budget

SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Payment", "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{3}-\\d{6}$"},
        "email": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$"},
        "iban": {"type": "string", "pattern": "^[A-Z]{2}\\d{2}[A-Z0-9]{11,30}$"},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "amount": {"type": "number"},
        "note": {"type": "string", "pattern": "^[^<>]*$"},
    },
    "patternProperties": {"^x-[a-z]+$": {"type": "string"}},
    "required": ["id", "email", "iban", "currency", "amount"],
    "additionalProperties": False,
}
RECORD = {"id": "PAY-123456", "email": "erika.mustermann@example.com", "iban": "DE89370400440532013000",
          "currency": "EUR", "amount": 99.5, "note": "Invoice 2024-118, second instalment. " * 22,
          "x-source": "web", "x-trace": "4bf92f3577b34da6a3ce929d0e0e4736"}


D2020 = "https://json-schema.org/draft/2020-12/schema"
MONEY = {"type": "object", "required": ["amount", "currency"], "additionalProperties": False,
         "properties": {"amount": {"type": "string", "pattern": "^-?\\d+(\\.\\d{1,4})?$"},
                        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}}
ADDRESS = {"type": "object", "required": ["street", "city", "country"], "unevaluatedProperties": False,
           "properties": {"street": {"type": "string", "maxLength": 200}, "city": {"type": "string"},
                          "postcode": {"type": "string"}, "country": {"type": "string", "pattern": "^[A-Z]{2}$"}}}
LINE = {"type": "object", "required": ["sku", "quantity", "price"], "additionalProperties": False,
        "properties": {"sku": {"type": "string", "pattern": "^[A-Z0-9-]{4,20}$"},
                       "quantity": {"type": "integer", "minimum": 1}, "price": {"$ref": "#/$defs/money"},
                       "discount": {"anyOf": [{"$ref": "#/$defs/money"}, {"type": "null"}]},
                       "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}
PAYMENT = {"oneOf": [
    {"type": "object", "properties": {"method": {"const": "card"}, "last4": {"pattern": "^\\d{4}$"}},
     "required": ["method", "last4"]},
    {"type": "object", "properties": {"method": {"const": "iban"}, "iban": {"type": "string"}},
     "required": ["method", "iban"]},
    {"type": "object", "properties": {"method": {"const": "invoice"}}, "required": ["method"]}]}
ORDER_SCHEMA = {
    "$schema": D2020, "$id": "https://example.com/order.json", "type": "object",
    "$defs": {"money": MONEY, "address": ADDRESS, "line": LINE, "payment": PAYMENT},
    "properties": {"id": {"type": "string", "format": "uuid"}, "created": {"type": "string", "format": "date-time"},
                   "customer": {"type": "object", "required": ["name"],
                                "properties": {"name": {"type": "string"}, "email": {"type": "string"},
                                               "billing": {"$ref": "#/$defs/address"},
                                               "shipping": {"$ref": "#/$defs/address"}}},
                   "lines": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/line"}},
                   "total": {"$ref": "#/$defs/money"}, "payment": {"$ref": "#/$defs/payment"},
                   "status": {"enum": ["new", "paid", "shipped", "cancelled"]}},
    "required": ["id", "lines", "total", "status"],
    "if": {"properties": {"status": {"const": "paid"}}}, "then": {"required": ["payment"]},
    "unevaluatedProperties": False}


def order(lines: int) -> dict[str, Any]:
    address = {"street": "Hauptstrasse 1", "city": "Berlin", "postcode": "10115", "country": "DE"}
    return {"id": "4bf92f35-77b3-4da6-a3ce-929d0e0e4736", "created": "2024-05-01T12:00:00Z",
            "customer": {"name": "Erika", "email": "erika@example.com", "billing": address, "shipping": address},
            "lines": [{"sku": f"SKU-{n:06d}", "quantity": 1 + n % 5, "price": {"amount": "9.99", "currency": "EUR"},
                       "discount": None if n % 2 else {"amount": "1.00", "currency": "EUR"}, "tags": ["a", "b"]}
                      for n in range(lines)],
            "total": {"amount": "99.90", "currency": "EUR"}, "status": "paid",
            "payment": {"method": "iban", "iban": "DE89370400440532013000"}}


POSITION = {"type": "array", "minItems": 2, "items": {"type": "number"}}
RING = {"type": "array", "minItems": 4, "items": POSITION}


def geometry(name: str, coordinates: Any) -> dict[str, Any]:
    return {"title": name, "type": "object", "required": ["type", "coordinates"],
            "properties": {"type": {"type": "string", "enum": [name]}, "coordinates": coordinates,
                           "bbox": {"type": "array", "minItems": 4, "items": {"type": "number"}}}}


# Shaped as geojson.org's FeatureCollection schema: every geometry a `oneOf` of all the types.
GEOJSON = {
    "$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["type", "features"],
    "properties": {"type": {"enum": ["FeatureCollection"]}, "features": {"type": "array", "items": {
        "type": "object", "required": ["type", "properties", "geometry"],
        "properties": {"type": {"enum": ["Feature"]}, "id": {"oneOf": [{"type": "number"}, {"type": "string"}]},
                       "properties": {"oneOf": [{"type": "null"}, {"type": "object"}]},
                       "geometry": {"oneOf": [
                           {"type": "null"}, geometry("Point", POSITION),
                           geometry("LineString", {"type": "array", "minItems": 2, "items": POSITION}),
                           geometry("Polygon", {"type": "array", "items": RING}),
                           geometry("MultiPoint", {"type": "array", "items": POSITION}),
                           geometry("MultiLineString", {"type": "array", "items": {
                               "type": "array", "minItems": 2, "items": POSITION}}),
                           geometry("MultiPolygon", {"type": "array", "items": {"type": "array", "items": RING}})]}}}}}}


def features(count: int) -> dict[str, Any]:
    def feature(n: int) -> dict[str, Any]:
        ring = [[(n * 7 + k) % 360 - 180.0, (n * 3 + k) % 180 - 90.0] for k in range(12)]
        return {"type": "Feature", "id": n, "properties": {"name": f"parcel {n}", "area": n * 1.5},
                "geometry": {"type": "Polygon", "coordinates": [[*ring, ring[0]]]}}
    return {"type": "FeatureCollection", "features": [feature(n) for n in range(count)]}


THREAD = {"$schema": D2020, "$ref": "#/$defs/comment", "$defs": {"comment": {
    "type": "object", "required": ["author", "text"], "additionalProperties": False,
    "properties": {"author": {"type": "string"}, "text": {"type": "string"}, "score": {"type": "integer"},
                   "replies": {"type": "array", "items": {"$ref": "#/$defs/comment"}}}}}}


def thread(depth: int) -> dict[str, Any]:
    comment: dict[str, Any] = {"author": "a", "text": "hello " * 10, "score": 3}
    if depth:
        comment["replies"] = [thread(depth - 1) for _ in range(4)]
    return comment


# json-schema.org's "Product" example, the one Confluent's JSON Schema serdes documentation uses.
PRODUCT = {
    "$schema": "http://json-schema.org/draft-07/schema#", "$id": "http://example.com/product.schema.json",
    "title": "Product", "description": "A product from Acme's catalog", "type": "object",
    "properties": {"productId": {"description": "The unique identifier for a product", "type": "integer"},
                   "productName": {"description": "Name of the product", "type": "string"},
                   "price": {"description": "The price of the product", "type": "number", "exclusiveMinimum": 0},
                   "tags": {"description": "Tags for the product", "type": "array", "items": {"type": "string"},
                            "minItems": 1, "uniqueItems": True},
                   "dimensions": {"type": "object", "properties": {"length": {"type": "number"},
                                                                   "width": {"type": "number"},
                                                                   "height": {"type": "number"}},
                                  "required": ["length", "width", "height"]}},
    "required": ["productId", "productName", "price"]}


def products(count: int) -> list[dict[str, Any]]:
    return [{"productId": n, "productName": f"An ice sculpture {n}", "price": 12.5 + n,
             "tags": ["cold", "ice", f"batch-{n % 7}"], "dimensions": {"length": 7.0, "width": 12.0, "height": 9.5}}
            for n in range(count)]


# A topic of a dozen event types: a `oneOf` of twelve branches told apart by a `const`, each `$ref`ing
# shared definitions, every value matching exactly one.
EVENTS = {
    "$schema": D2020, "type": "array", "items": {"oneOf": [{"$ref": f"#/$defs/e{n}"} for n in range(12)]},
    "$defs": {"actor": {"type": "object", "required": ["id"], "additionalProperties": False,
                        "properties": {"id": {"type": "string", "pattern": "^u-[0-9]{1,12}$"},
                                       "roles": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}}}},
              **{f"e{n}": {"type": "object", "required": ["type", "at", "actor"], "additionalProperties": False,
                           "properties": {"type": {"const": f"event.{n}"}, "at": {"type": "string", "format": "date-time"},
                                          "actor": {"$ref": "#/$defs/actor"}, "count": {"type": "integer", "minimum": 0},
                                          "note": {"type": "string", "maxLength": 200}}} for n in range(12)}}}


def events(count: int) -> list[dict[str, Any]]:
    return [{"type": f"event.{n % 12}", "at": "2024-05-01T12:00:00Z", "actor": {"id": f"u-{n}", "roles": ["user"]},
             "count": n, "note": "ok"} for n in range(count)]


def schema_document(definitions: int) -> dict[str, Any]:
    """A large schema, as a value checked against the 2020-12 meta-schema (a registry of schemas)."""
    return {"$schema": D2020, "$defs": {f"order{n}": {k: v for k, v in ORDER_SCHEMA.items() if k != "$id"}
                                        for n in range(definitions)}}


def fan_out(depth: int, leaf: Any = None) -> dict[str, Any]:
    defs: dict[str, Any] = {"d0": {"type": "object"} if leaf is None else leaf}
    for level in range(1, depth + 1):
        defs[f"d{level}"] = {"allOf": [{"$ref": f"#/$defs/d{level - 1}"}] * 2}
    return {"$schema": D2020, "$defs": defs, "$ref": f"#/$defs/d{depth}"}


def per_validation_us(validator: Any, value: Any, count: int, rounds: int, budgeted: bool = False) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(count):
            if budgeted:
                assert within_budget is not None
                with within_budget(value):
                    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            else:
                error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is not None:
                raise AssertionError(f"the value must be valid: {error.message}")
        best = min(best, time.perf_counter() - started)
    return best / count * 1e6


def budget_figures(count: int, rounds: int) -> None:
    record = made(jsonschema.Draft7Validator, SCHEMA)
    orders = made(jsonschema.Draft202012Validator, ORDER_SCHEMA)
    small_order = order(40)
    for name, validator, value, times in (("record", record, RECORD, count),
                                          ("40-line order", orders, small_order, max(count // 50, 10))):
        free = per_validation_us(validator, value, times, rounds)
        if within_budget is None:
            print(f"{name}: linear {free:.1f} us (no work budget in this tree)")
            continue
        bounded = per_validation_us(validator, value, times, rounds, budgeted=True)
        print(f"{name}: linear {free:.1f} us, within the budget {bounded:.1f} us, ratio {bounded / free:.3f}")
    if within_budget is None:
        return
    default = json_validation.WorkBudget()
    print(f"steps per JSON node (the default allows {default.base:,} plus {default.per_node} per node):")
    meta = jsonschema.Draft202012Validator.META_SCHEMA
    cases = (("payment records, 1 MB", {"type": "array", "items": SCHEMA}, [RECORD] * 1_000),
             ("order of 7,200 lines", ORDER_SCHEMA, order(7_200)),
             ("GeoJSON, 2,500 polygons", GEOJSON, features(2_500)),
             ("comment thread, 7 levels of 4 replies", THREAD, thread(6)),
             ("json-schema.org Product, 5,000", {"type": "array", "items": PRODUCT}, products(5_000)),
             ("12 event types (oneOf of $refs), 8,000", EVENTS, events(8_000)),
             ("2020-12 meta-schema on a schema document", meta, schema_document(400)))
    for name, schema, value in cases:
        validator = made(jsonschema.validators.validator_for(schema), schema)
        started = time.perf_counter()
        with within_budget(value, json_validation.WorkBudget(base=10**15)) as spending:
            assert jsonschema.exceptions.best_match(validator.iter_errors(value)) is None
        took = time.perf_counter() - started
        nodes = json_validation.json_nodes(value)
        size = len(json.dumps(value, separators=(",", ":")))
        print(f"  {name}: {size:,} bytes, {nodes:,} nodes, {spending.steps:,} steps ({spending.steps / nodes:.2f} "
              f"per node), {took * 1e3:.0f} ms")
    validator = made(jsonschema.Draft202012Validator, fan_out(30))
    started = time.perf_counter()
    try:
        with within_budget({}):
            jsonschema.exceptions.best_match(validator.iter_errors({}))
    except json_validation.WorkBudgetExceededError as exc:
        print(f"30-level fan-out schema ({len(json.dumps(fan_out(30)))} bytes) refused in "
              f"{(time.perf_counter() - started) * 1e3:.0f} ms: {exc}")


def hostile_figures() -> None:
    """How long hostile schemas take to be refused under the default budget, on 1 MB values."""
    typical = {"k": ["abcdefgh"] * 100_000}  # 1.1 MB, 100,002 nodes
    dense = [0] * 500_000  # 1 MB, 500,001 nodes
    every_keyword = {"$schema": D2020, "type": ["array", "integer"], "minimum": 0, "maximum": 9, "multipleOf": 1,
                     "minLength": 0, "maxItems": 10**6, "enum": [0, 1], "const": 0, "required": [], "pattern": "x",
                     "properties": {}, "if": True, "then": True, "else": True, "not": False, "allOf": [True],
                     "anyOf": [True], "oneOf": [True], "contains": True, "prefixItems": [True], "format": "x",
                     "dependentSchemas": {}, "unevaluatedItems": True, "patternProperties": {}}
    cases = (("30-level fan-out", fan_out(30), typical), ("30-level fan-out", fan_out(30), dense),
             ("anyOf of 100,000 failing branches", {"anyOf": [{"type": "null"}] * 100_000}, typical),
             ("allOf of 10,000 uniqueItems", {"allOf": [{"uniqueItems": True}] * 10_000}, dense),
             ("allOf of 1,000 DFA-defeating patterns", {"allOf": [{"pattern": "[ab]*a[ab]{200}c"}] * 1_000},
              "ab" * 500_000),
             ("every keyword on each item", {"type": "array", "items": every_keyword}, dense))
    for name, schema, value in cases:
        print(f"  {timed_refusal(name, schema, value)}")


def timed_refusal(name: str, schema: Any, value: Any) -> str:
    """How `value` fares against `schema` under the default budget, and how long it takes."""
    validator = made(jsonschema.validators.validator_for(schema), schema)
    nodes = json_validation.json_nodes(value)
    started, cpu = time.perf_counter(), time.process_time()
    try:
        with within_budget(value):
            jsonschema.exceptions.best_match(validator.iter_errors(value))
        outcome = "passed"
    except json_validation.WorkBudgetExceededError as exc:
        outcome = f"refused at {exc.steps:,} steps"
    return (f"{name}, {nodes:,} nodes: {outcome} in {time.perf_counter() - started:.3f} s "
            f"({time.process_time() - cpu:.3f} s of CPU)")


ALL_KEYWORDS: dict[str, Any] = {"type": ["object", "array", "string", "number", "integer", "boolean", "null"], "minimum": 0, "maximum": 10,
    "exclusiveMinimum": -1, "exclusiveMaximum": 11, "multipleOf": 1, "minLength": 0, "maxLength": 9, "minItems": 0,
    "maxItems": 9, "minProperties": 0, "maxProperties": 9, "enum": [0, 1], "const": 0, "required": [], "pattern": "x",
    "uniqueItems": True, "properties": {}, "dependentRequired": {}, "if": True, "then": True, "else": True,
    "not": False, "allOf": [True], "anyOf": [True], "oneOf": [True], "propertyNames": True, "additionalProperties": True,
    "contains": True, "minContains": 0, "items": True, "prefixItems": [True], "format": "x", "dependentSchemas": {},
    "unevaluatedItems": True, "unevaluatedProperties": True, "patternProperties": {}}

def hostile_shapes() -> Any:
    """(name, schema, value) of hostile shapes, each a few hundred ms of work."""
    big = [0] * 100_000
    yield "fan-out 15", fan_out(15), {}
    yield "anyOf failing on 100k list", {"anyOf": [{"type": "null"}] * 50 + [True]}, big
    yield "patternProperties 100 x 10k names", {"patternProperties": {f"^x{i}$": True for i in range(100)}}, {f"k{i}": 0 for i in range(10_000)}
    yield "additionalProperties+patterns", {"patternProperties": {f"^x{i}$": True for i in range(100)}, "additionalProperties": True}, {f"k{i}": 0 for i in range(10_000)}
    yield "unknown keys 100", {"type": "array", "items": {f"u{i}": 0 for i in range(100)}}, [0] * 20_000
    yield "unknown keys 10000", {"type": "array", "items": {f"u{i}": 0 for i in range(10000)}}, [0] * 200
    yield "properties width 1000", {"type": "array", "items": {"properties": {f"p{i}": True for i in range(1000)}}}, [{}] * 2_000
    yield "required 1000", {"type": "array", "items": {"required": [f"p{i}" for i in range(1000)]}}, [{f"p{i}": 0 for i in range(1000)}] * 200
    yield "dependentRequired", {"$schema": D2020, "type": "array", "items": {"dependentRequired": {"a": [f"p{i}" for i in range(1000)]}}}, [{"a": 0, **{f"p{i}": 0 for i in range(1000)}}] * 200
    yield "unevaluatedItems", {"$schema": D2020, "contains": True, "unevaluatedItems": False}, [0] * 20_000
    yield "uniqueItems ints x20", {"allOf": [{"uniqueItems": True}] * 20}, list(range(100_000))
    yield "uniqueItems objects", {"allOf": [{"uniqueItems": True}] * 5}, [{"a": [i, i]} for i in range(30_000)]
    yield "contains required", {"contains": {"required": [f"p{i}" for i in range(100)]}}, [{}] * 50_000
    yield "const big list", {"allOf": [{"const": [0] * 100_000 + [1]}] * 20}, [0] * 100_001
    yield "enum big strings", {"type": "array", "items": {"enum": ["a" * 100_000 + str(i) for i in range(10)]}}, ["a" * 100_000 + "x"] * 100
    yield "enum many small", {"type": "array", "items": {"enum": list(range(10_000))}}, [-1] * 200
    yield "pattern long ok", {"allOf": [{"pattern": "b"}] * 100}, "b" * 1_000_000
    yield "ref long", {"$schema": D2020, "$defs": {"x" * 10_000: True}, "type": "array", "items": {"$ref": "#/$defs/" + "x" * 10_000}}, [0] * 5_000
    yield "oneOf 12 all valid", {"type": "array", "items": {"oneOf": [{"type": "integer"}] * 12}}, [0] * 5_000
    yield "type error big dict", {"allOf": [{"type": "array"}] * 50}, {f"k{i}": [i, "v"] for i in range(30_000)}
    yield "multipleOf big", {"type": "array", "items": {"multipleOf": 3 ** 2000}}, [3 ** 2500] * 2_000
    yield "all keywords per item", {"$schema": D2020, "type": "array", "items": ALL_KEYWORDS}, [0] * 5_000
    # a `$ref` beside an `$id`: a new resolver at each application, so its resolution is never kept
    yield "$ref beside $id per item", {"$schema": D2020, "$id": "urn:root", "$defs": {"d": {}}, "type": "array",
                                       "items": {"$id": "urn:item", "$ref": "urn:root#/$defs/d"}}, [0] * 5_000
    wrapped = {"d0": {"minLength": 0}, **{f"d{n}": {"allOf": [{"$id": f"urn:w{n}", "$ref": f"urn:root#/$defs/d{n - 1}"}] * 2}
                                        for n in range(1, 13)}}
    yield "fan-out 12 through $ids", {"$schema": D2020, "$id": "urn:root", "$defs": wrapped, "$ref": "#/$defs/d12"}, {}
    yield "not-not nested", {"type": "array", "items": {"not": {"not": {"not": {"not": {"type": "integer"}}}}}}, [0] * 10_000



def per_step_figures() -> None:
    """Microseconds per step of each hostile shape: what the budget's steps are worth at worst."""
    for name, schema, value in hostile_shapes():
        validator = made(jsonschema.validators.validator_for(schema), schema)
        started = time.perf_counter()
        with within_budget(value, json_validation.WorkBudget(base=10**15)) as spending:
            jsonschema.exceptions.best_match(validator.iter_errors(value))
        took = time.perf_counter() - started
        print(f"  {name}: {took * 1e3:.0f} ms, {spending.steps:,} steps, {took * 1e6 / max(spending.steps, 1):.2f} us a step")


def refusal_figures() -> None:
    """Time to refusal of the 30-level fan-out under the default budget: on `{}` (the base alone, best of
    5), on a 1 MB value of 100,002 nodes and on the densest 1 MB (`[0,0,...]`, 500,001 nodes), one run
    each, as they take seconds; then the densest 1 MB against the fan-out to `const: 1`, whose errors
    (`1 was expected`) do not quote the value: the cost of errors passing up 60 keywords."""
    print(min((timed_refusal("30-level fan-out", fan_out(30), {}) for _ in range(5)),
              key=lambda line: float(line.split(" in ")[-1].split(" s")[0])))
    print(timed_refusal("30-level fan-out", fan_out(30), {"k": ["abcdefgh"] * 100_000}))
    print(timed_refusal("30-level fan-out", fan_out(30), [0] * 500_000))
    print(timed_refusal("30-level fan-out to const: 1", fan_out(30, {"const": 1}), [0] * 500_000))


def schema_check_figures() -> None:
    """Steps per JSON node and time of the checks of a schema (its patterns and the meta-schema), as
    `serdes._validator` makes them when a deserializer first meets a schema id; then the time a
    deserializer takes to refuse values of an id whose large schema fails its meta-schema check at the
    end, ten values (the refusal kept per id: checked once)."""
    huge = schema_document(400)
    cases = (("payment record", SCHEMA), ("order", ORDER_SCHEMA), ("GeoJSON", GEOJSON), ("12 event types", EVENTS),
             ("comment thread", THREAD), ("Product", PRODUCT), ("400 orders in $defs", huge))
    for name, schema in cases:
        cls = json_validation.validator_class_for(schema)
        started = time.perf_counter()
        with within_budget(schema, json_validation.WorkBudget(base=10**15)) as spending:
            json_validation.check_patterns(schema, referencing.jsonschema.DRAFT202012)
            json_validation.check_schema(cls, schema)
        took = time.perf_counter() - started
        nodes = json_validation.json_nodes(schema)
        size = len(json.dumps(schema, separators=(",", ":")))
        print(f"  {name}: {size:,} bytes, {nodes:,} nodes, {spending.steps:,} steps "
              f"({spending.steps / nodes:.2f} per node), {took * 1e3:.0f} ms")
    broken = {**huge, "type": 5}  # the meta-schema's `type` comes after its `$defs`: all is checked first

    class Client:
        def schema_by_id(self, schema_id: int) -> Any:
            return serdes.FetchedSchema(json.dumps(broken), "JSON")

        def qualified(self, subject: str) -> str:
            return subject

    deserializer = serdes.JSONDeserializer(Client())  # type: ignore[arg-type]
    started = time.perf_counter()
    for _ in range(10):
        try:
            deserializer(serdes.frame(1, b"{}"))
        except serdes.SerializationError as exc:
            refusal = str(exc)
    print(f"  ten values of an id whose {len(json.dumps(broken)):,}-byte schema is invalid: "
          f"{time.perf_counter() - started:.2f} s ({refusal[:60]}...)")


def ordinary_figures(rounds: int) -> None:
    """Per validation within the budget, as `serdes._validate` does: runs against any tree with a budget."""
    record = made(jsonschema.Draft7Validator, SCHEMA)
    orders = made(jsonschema.Draft202012Validator, ORDER_SCHEMA)
    geo = made(jsonschema.Draft7Validator, GEOJSON)
    print(f"record {per_validation_us(record, RECORD, 2000, rounds, budgeted=True):.1f} us, "
          f"40-line order {per_validation_us(orders, order(40), 40, rounds, budgeted=True):.0f} us, "
          f"20 GeoJSON polygons {per_validation_us(geo, features(20), 40, rounds, budgeted=True):.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ordinary", action="store_true", help="only the ordinary validations, within the budget")
    parser.add_argument("--per-step", action="store_true", help="only the microseconds per step of hostile shapes")
    parser.add_argument("--refusal", action="store_true", help="only the fan-out's time to refusal on 1 MB")
    parser.add_argument("--schema-check", action="store_true", help="only the steps and time of schema checks")
    args = parser.parse_args()
    if args.schema_check:
        schema_check_figures()
        return
    if args.refusal:
        refusal_figures()
        return
    if args.ordinary:
        ordinary_figures(args.rounds)
        return
    if args.per_step:
        per_step_figures()
        return
    size = len(json.dumps(RECORD, separators=(",", ":")))
    stock = jsonschema.Draft7Validator(SCHEMA)
    linear = made(jsonschema.Draft7Validator, SCHEMA)
    old = per_validation_us(stock, RECORD, args.count, args.rounds)
    new = per_validation_us(linear, RECORD, args.count, args.rounds)
    print(f"{size}-byte record, 5 patterns + patternProperties: re {old:.1f} us, RE2 {new:.1f} us, "
          f"ratio {new / old:.2f}")
    evil = {"type": "string", "pattern": "^(a+)+$"}
    for n in (18, 20, 22):
        started = time.perf_counter()
        assert not jsonschema.Draft7Validator(evil).is_valid("a" * n + "!")
        print(f"^(a+)+$ against {n + 1} characters with re: {time.perf_counter() - started:.3f} s")
    for n in (5_000, 100_000):
        validator = made(jsonschema.Draft7Validator, evil)
        started = time.perf_counter()
        assert not validator.is_valid("a" * n + "!")
        print(f"^(a+)+$ against {n + 1} characters with RE2: {(time.perf_counter() - started) * 1e3:.3f} ms")
    budget_figures(args.count, args.rounds)
    if within_budget is not None and hasattr(json_validation, "_charge"):  # the budget counting keyword work
        print("hostile schemas on 1 MB values, under the default budget:")
        hostile_figures()


if __name__ == "__main__":
    main()
