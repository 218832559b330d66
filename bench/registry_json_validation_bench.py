"""Cost of the JSON serdes' linear-time regexes (`registry.json_validation`) against jsonschema's own.

Validates one 1 KiB record with five ordinary `pattern`s and a `patternProperties` (closed by
`additionalProperties: false`), the way `registry.serdes._validate` does (`best_match` over
`iter_errors`), with jsonschema's stock draft-07 class (Python's `re`: what the serdes used before)
and with `linear_time` of it (RE2 through `json_model.compile_pattern`). Prints microseconds per
validation (best of `--rounds` rounds of `--count` validations) and their ratio; then `^(a+)+$`
against `a` * n + "!": the stock class for small n (each `a` doubles its time), the linear one for
n = 5,000 and 100,000.

    .venv/bin/python bench/registry_json_validation_bench.py [--count 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import jsonschema
import jsonschema.exceptions

from registry.json_validation import linear_time

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


def per_validation_us(validator: Any, value: Any, count: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(count):
            if jsonschema.exceptions.best_match(validator.iter_errors(value)) is not None:
                raise AssertionError("the record must be valid")
        best = min(best, time.perf_counter() - started)
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    size = len(json.dumps(RECORD, separators=(",", ":")))
    stock = jsonschema.Draft7Validator(SCHEMA)
    linear = linear_time(jsonschema.Draft7Validator)(SCHEMA)
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
        validator = linear_time(jsonschema.Draft7Validator)(evil)
        started = time.perf_counter()
        assert not validator.is_valid("a" * n + "!")
        print(f"^(a+)+$ against {n + 1} characters with RE2: {(time.perf_counter() - started) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
