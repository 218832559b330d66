"""jsonschema validators whose regexes and `uniqueItems` take linear time, for the JSON serdes.

jsonschema evaluates `pattern` and `patternProperties` (in that keyword, in `additionalProperties`
and in `unevaluatedProperties`) with Python's `re`, which backtracks while holding the interpreter
lock: a schema anyone with WRITE on one subject registers (`^(a+)+$`) would stall every producer and
consumer validating a value like "aaaa...a!" against it, and a consumer validates against the schema
whose id the message carries. `linear_time(cls)` is jsonschema's `cls` with those keywords matched by
the registry's own compiler (`registry.schemas.json_model.compile_pattern`): RE2, linear in the text
for a given pattern, the lock released while it searches, patterns read as Java reads them (as
Confluent's Java serdes and the registry's compatibility checks do). A pattern RE2 cannot evaluate
(backreferences, lookaround) is refused with `UnevaluablePatternError`, never taken as an answer.
`uniqueItems` is jsonschema's meaning in linear time too (jsonschema compares every pair of items
that cannot be sorted: 20 s for a 40 KB array of 4,000 objects), and `check_schema` checks a schema
against its meta-schema with these keywords.

The work of one value is bounded too: a schema whose `$ref`s fan out (`allOf` of two references to a
definition that does the same, 30 levels deep, in 2 KB) makes jsonschema evaluate each path through
them, 2**depth subschema applications. Every application of a subschema to a part of the value
(`descend`, `$ref`, `if`, `not`, `contains`, the evaluated-property searches) makes a new validator
through `evolve`, which these classes define, so `evolve` is where the steps are counted; inside
`within_budget(value, budget)` a value that takes more than `WorkBudget.base` steps plus
`WorkBudget.per_node` per JSON node of the value raises `WorkBudgetExceededError`, which no keyword
takes for an answer. The count lives in a context variable: one per thread, so validators can be
shared across threads, and fresh for each value.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.jsonschema
from jsonschema.exceptions import ValidationError

from registry.schemas.json_model import (
    CompiledPattern,
    UnsupportedPatternError,
    compile_pattern,
    quote_pattern,
)
from registry.schemas.json_schema import unique_items

_DRAFT2019: Final = "https://json-schema.org/draft/2019-09/schema"


class UnevaluablePatternError(Exception):
    """A `pattern` or `patternProperties` regex that cannot be evaluated in linear time with Java's
    meaning, or a text it cannot be matched against; the message names the keyword, the regex and why."""

    def __init__(self, keyword: str, regex: str, reason: str) -> None:
        super().__init__(f"JSON Schema {keyword} {quote_pattern(regex)} cannot be evaluated: {reason}")
        self.keyword = keyword
        self.regex = regex
        self.reason = reason


class WorkBudgetExceededError(Exception):
    """A value whose validation took more steps (subschema applications) than its budget allowed."""

    def __init__(self, steps: int, budget: WorkBudget, nodes: int) -> None:
        super().__init__(f"JSON Schema validation exceeded its work budget of {steps} steps "
                         f"({budget.base} plus {budget.per_node} per JSON node, the value having {nodes})")
        self.steps = steps


class CircularValueError(ValueError):
    """A value with a container inside itself: not JSON, and it would never end validating."""


@attrs.frozen
class WorkBudget:
    """How many subschema applications validating one value may take: `base` plus `per_node` per JSON
    node of the value (each object, array, string, number, boolean and null counts one; `per_node=0`
    bounds every value alike). The default is far above what ordinary schemas use (one or two steps
    a node; see registry/README.md, Serdes) and refuses a 30-level fan-out schema in about 0.35 s."""

    base: int = attrs.field(default=50_000)
    per_node: int = attrs.field(default=100)

    @base.validator
    @per_node.validator
    def _counted(self, attribute: attrs.Attribute[int], value: int) -> None:
        least = 1 if attribute.name == "base" else 0
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"WorkBudget.{attribute.name} must be an integer of at least {least}, not {value!r}")


DEFAULT_WORK_BUDGET: Final = WorkBudget()


_END: Final = object()


def json_nodes(value: Any) -> int:
    """The JSON nodes of `value` (objects, arrays and the scalars they hold), counted as a validator
    visits them; `CircularValueError` when a container holds itself."""
    count = 0
    on_path: set[int] = set()
    stack: list[tuple[Any, Iterator[Any]]] = []
    pending: list[Any] = [value]
    while pending or stack:
        if pending:
            node = pending.pop()
            count += 1
            if isinstance(node, Mapping):
                children: Iterator[Any] = iter(node.values())
            elif isinstance(node, (list, tuple)):
                children = iter(node)
            else:
                continue
            if id(node) in on_path:
                raise CircularValueError("the value holds itself")
            on_path.add(id(node))
            stack.append((node, children))
        parent, children = stack[-1]
        child = next(children, _END)
        if child is _END:
            on_path.discard(id(parent))
            stack.pop()
        else:
            pending.append(child)
    return count


class _Spending:
    """The steps left to one value: `budget.base` at first; the value's nodes are counted (a walk of
    it) only when those run out, so ordinary values pay nothing for the bound. A context manager (a
    class rather than a generator: it is entered once per value validated)."""

    __slots__ = ("budget", "left", "nodes", "token", "value")

    def __init__(self, value: Any, budget: WorkBudget) -> None:
        self.value = value
        self.budget = budget
        self.left = budget.base
        self.nodes: int | None = None
        self.token: contextvars.Token[_Spending | None] | None = None

    def __enter__(self) -> _Spending:
        self.token = _SPENDING.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.token is not None:
            _SPENDING.reset(self.token)
            self.token = None

    @property
    def steps(self) -> int:
        """The steps taken so far."""
        granted = self.budget.base + (0 if self.nodes is None else self.budget.per_node * self.nodes)
        return granted - self.left

    def exhausted(self) -> None:
        """Called when `left` falls below zero: grants the per-node steps once, else refuses."""
        if self.nodes is None:
            self.nodes = json_nodes(self.value)
            self.left += self.budget.per_node * self.nodes
            if self.left >= 0:
                return
        nodes = self.nodes
        raise WorkBudgetExceededError(self.budget.base + self.budget.per_node * nodes, self.budget, nodes)


_SPENDING: Final[contextvars.ContextVar[_Spending | None]] = contextvars.ContextVar("json_validation_spending",
                                                                                    default=None)


def within_budget(value: Any, budget: WorkBudget = DEFAULT_WORK_BUDGET) -> _Spending:
    """A context manager: validating `value` inside it raises `WorkBudgetExceededError` past
    `budget`'s steps; what it gives `as` counts them (`.steps`)."""
    return _Spending(value, budget)


def _compiled(keyword: str, regex: object) -> CompiledPattern:
    if not isinstance(regex, str):
        raise UnevaluablePatternError(keyword, str(regex), "it is not a string")
    try:
        compiled: CompiledPattern = compile_pattern(regex)
    except UnsupportedPatternError as exc:
        raise UnevaluablePatternError(keyword, regex, exc.reason) from None
    return compiled


def _found(keyword: str, regex: object, text: str) -> bool:
    compiled = _compiled(keyword, regex)
    try:
        return compiled.matches(text, text_kind="a string" if keyword == "pattern" else "a property name")
    except UnsupportedPatternError as exc:
        raise UnevaluablePatternError(keyword, compiled.regex, exc.reason) from None


def _valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def _listed(names: list[str]) -> str:
    return ", ".join(repr(name) for name in names) + (" was" if len(names) == 1 else " were")


# The keywords. Their error texts are jsonschema's, so messages read as before.

def _pattern(validator: Any, regex: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _found("pattern", regex, instance):
        yield ValidationError(f"{instance!r} does not match {regex!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for regex, subschema in patterns.items():
        for name, value in instance.items():
            if _found("patternProperties", regex, name):
                yield from validator.descend(value, subschema, path=name, schema_path=regex)


def _not_covered(instance: Any, schema: Any) -> list[str]:
    """The names in `instance` that neither `properties` nor `patternProperties` of `schema` cover."""
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    return [name for name in instance
            if name not in properties and not any(_found("patternProperties", regex, name) for regex in patterns)]


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any
                           ) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _not_covered(instance, schema)
    if validator.is_type(additional, "object"):
        for name in extras:
            yield from validator.descend(instance[name], additional, path=name)
    elif not additional and extras:
        if "patternProperties" in schema:
            names = ", ".join(repr(name) for name in sorted(extras))
            regexes = ", ".join(repr(regex) for regex in sorted(schema["patternProperties"]))
            verb = "does" if len(extras) == 1 else "do"
            yield ValidationError(f"{names} {verb} not match any of the regexes: {regexes}")
        else:
            yield ValidationError(f"Additional properties are not allowed ({_listed(sorted(extras))} unexpected)")


def _evaluated(validator: Any, instance: Any, schema: Any, draft2019: bool) -> set[str]:
    """The names in `instance` that `schema` evaluates, for `unevaluatedProperties`: jsonschema's
    reading of each draft (in 2019-09, `properties`, `additionalProperties` and
    `unevaluatedProperties` count by their keys, or all names when `true`)."""
    if not isinstance(schema, dict):
        return set()
    names: set[str] = set()
    references = []
    if schema.get("$ref") is not None:
        references.append(validator._resolver.lookup(schema["$ref"]))
    if draft2019 and "$recursiveRef" in schema:
        references.append(referencing.jsonschema.lookup_recursive_ref(validator._resolver))
    if not draft2019 and schema.get("$dynamicRef") is not None:
        references.append(validator._resolver.lookup(schema["$dynamicRef"]))
    for resolved in references:
        names |= _evaluated(validator.evolve(schema=resolved.contents, _resolver=resolved.resolver), instance,
                            resolved.contents, draft2019)
    if draft2019:
        for keyword in ("properties", "additionalProperties", "unevaluatedProperties"):
            value = schema.get(keyword)
            if value is True:
                names |= instance.keys()
            elif isinstance(value, dict):
                names |= {name for name in value if name in instance}
    else:
        if isinstance(schema.get("properties"), dict):
            names |= schema["properties"].keys() & instance.keys()
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            if schema.get(keyword) is not None:
                names |= {name for name, value in instance.items()
                          if _valid(validator.descend(value, schema[keyword]))}
    for regex in schema.get("patternProperties", {}):
        names |= {name for name in instance if _found("patternProperties", regex, name)}
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            names |= _evaluated(validator, instance, subschema, draft2019)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                names |= _evaluated(validator, instance, subschema, draft2019)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            names |= _evaluated(validator, instance, schema["if"], draft2019)
            if "then" in schema:
                names |= _evaluated(validator, instance, schema["then"], draft2019)
        elif "else" in schema:
            names |= _evaluated(validator, instance, schema["else"], draft2019)
    return names


def _unevaluated_properties(draft2019: bool) -> Any:
    def unevaluated_properties(validator: Any, unevaluated: Any, instance: Any, schema: Any
                               ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        evaluated = _evaluated(validator, instance, schema, draft2019)
        refused = [name for name, value in instance.items() if name not in evaluated
                   and not _valid(validator.descend(value, unevaluated, path=name, schema_path=name))]
        if refused and unevaluated is False:
            yield ValidationError(f"Unevaluated properties are not allowed ({_listed(sorted(refused))} unexpected)")
        elif refused:
            yield ValidationError("Unevaluated properties are not valid under the given schema "
                                  f"({_listed(refused)} unevaluated and invalid)")
    return unevaluated_properties


def _evolve(self: Any, **changes: Any) -> Any:
    # jsonschema's own `evolve` picks the class of a subschema (or referenced schema) with a `$schema`
    # from its global table: the stock class, whose keywords use `re`. This one keeps to linear time,
    # and counts the step against the value's budget (`within_budget`).
    spending = _SPENDING.get()
    if spending is not None:
        spending.left -= 1
        if spending.left < 0:
            spending.exhausted()
    schema = changes.setdefault("schema", self.schema)
    cls = linear_time(jsonschema.validators.validator_for(schema, default=type(self)))
    for field in attrs.fields(type(self)):
        if field.init and field.alias not in changes:
            changes[field.alias] = getattr(self, field.name)
    return cls(**changes)


_LINEAR: dict[Any, Any] = {}
_LINEAR_LOCK = threading.Lock()


def linear_time(cls: Any) -> Any:
    """jsonschema's validator class `cls` with its regex keywords matched in linear time (one class per
    draft, made once; a class this returned is returned as it is)."""
    with _LINEAR_LOCK:
        found = _LINEAR.get(cls)
        if found is None:
            draft2019 = cls.ID_OF(cls.META_SCHEMA) == _DRAFT2019
            keywords = {"pattern": _pattern, "patternProperties": _pattern_properties,
                        "additionalProperties": _additional_properties,
                        "unevaluatedProperties": _unevaluated_properties(draft2019), "uniqueItems": unique_items}
            found = jsonschema.validators.extend(
                cls, validators={k: v for k, v in keywords.items() if k in cls.VALIDATORS})
            found.evolve = _evolve
            _LINEAR[cls] = _LINEAR[found] = found
        return found


def validator_class_for(schema: Any) -> Any:
    """The linear-time validator class for `schema`: its `$schema`'s draft, else 2020-12 (as jsonschema)."""
    return linear_time(jsonschema.validators.validator_for(schema))


def check_schema(cls: Any, schema: Any) -> None:
    """`cls.check_schema(schema)` (`SchemaError` at the first error), with the meta-schema's keywords
    in linear time and its `regex` format (every `pattern` and `patternProperties` name) read by RE2:
    the patterns Java and RE2 accept (`\\p{L}`), not the ones Python's `re` compiles."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {**cls.FORMAT_CHECKER.checkers,
                        "regex": (lambda regex: _compiled("pattern", regex) is not None, UnevaluablePatternError)}
    meta = linear_time(jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls))
    for error in meta(cls.META_SCHEMA, format_checker=checker).iter_errors(schema):
        raise jsonschema.exceptions.SchemaError.create_from(error)


def check_patterns(contents: Any, specification: referencing.Specification[Any]) -> None:
    """Compiles the `pattern` and `patternProperties` regexes of the schema `contents` and of its
    subschemas (`specification`'s, or those of a subschema's own `$schema`), so that a validator is
    refused when it is built rather than at its first value; `UnevaluablePatternError` names the first
    pattern that cannot be evaluated. What this cannot reach (a `$ref` into a `const`) is refused
    when it is evaluated."""
    pending = [(contents, specification)]
    while pending:
        node, spec = pending.pop()
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("$schema"), str):
            spec = referencing.jsonschema.specification_with(node["$schema"], default=spec)
        if isinstance(node.get("pattern"), str):
            _compiled("pattern", node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            for regex in node["patternProperties"]:
                _compiled("patternProperties", regex)
        try:
            pending.extend((child, spec) for child in spec.subresources_of(node))
        except (AttributeError, TypeError):  # a malformed keyword; the validator meets it when evaluating
            continue
