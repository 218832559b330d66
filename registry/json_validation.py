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
through `evolve`, which these classes define, so `evolve` is where applications are counted (it makes
the validator without attrs' `__init__`, and a `$ref`'s resolution is kept for the rest of the value:
`_validate_reference`; together a quarter to a third of what a fan-out's step cost). The work
inside a keyword is counted as it is done, in proportion to the sizes it compares: `enum` and `const`
by the nodes compared, `uniqueItems` by the nodes hashed, each regex search by its text times its
program (RE2's worst case), a pattern's compilation, `multipleOf` by the digits divided, a `$ref` by its characters and the segments of its pointer, `properties`,
`required` and the like by their entries, each keyword a subschema holds (known or not), each item
`contains` tries, the names `additionalProperties` and `unevaluatedProperties` go through, each `true`
subschema applied, and each error by its message (jsonschema's messages quote the value) and at each
keyword it passes on its way up. A message quoting the value is written only when read (`QuotingError`:
the serdes never read one), its length measured from the reprs of what it quotes, each measured once
per value. Inside `within_budget(value, budget)` a value whose work passes
`WorkBudget.base` steps plus `WorkBudget.per_node` per JSON node of the value raises
`WorkBudgetExceededError`, which no keyword takes for an answer. The count lives in a context variable: one per thread, so validators can be
shared across threads, and fresh for each value. `anyOf` and `oneOf` leave a failing branch at its
first error (jsonschema evaluates it whole, to report its errors should no branch match: they are
gathered only then), `unevaluatedItems` keeps the evaluated indexes in a set (jsonschema's list made
it quadratic), and `multipleOf` answers for integers beyond a float's range (jsonschema raised
`OverflowError`); answers and errors are jsonschema's. Leaving a branch at its first error is only
done where every reference resolves: jsonschema raises on one that cannot be resolved when it reaches
it (`referencing`'s `Unresolvable`; 2020-12 resolves a `$dynamicRef` first as a `$ref`, so
`"$dynamicRef": "#node"` in a resource with no anchor "node" is one), and a branch left early never
reaches what follows in it: kgov answered "valid" (an `anyOf` whose second branch matched) or named
another error where jsonschema raised. `validator_with` resolves every reference its evaluation can
reach once (`_all_resolve`); a validator whose references are not all proven to resolve evaluates each
branch whole, as jsonschema does, and raises where it raises. The serdes check a schema (its patterns and
meta-schema) within `SCHEMA_CHECK_BUDGET`, counted over the schema's nodes.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

import attrs
import jsonschema
import jsonschema._keywords  # the keyword functions `_QUOTING` stands in for
import jsonschema._legacy_keywords
import jsonschema.exceptions
import jsonschema.validators
import jsonschema_specifications  # jsonschema's own registry of meta-schemas (a dependency of jsonschema >= 4.18)
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import ValidationError

from registry.schemas.json_model import (
    CompiledPattern,
    UnsupportedPatternError,
    compile_pattern,
    quote_pattern,
    quote_reason,
)
from registry.schemas.json_schema import repeats

_DRAFT2019: Final = "https://json-schema.org/draft/2019-09/schema"


class UnevaluablePatternError(Exception):
    """A `pattern` or `patternProperties` regex that cannot be evaluated in linear time with Java's
    meaning, or a text it cannot be matched against; the message names the keyword, the regex and why."""

    def __init__(self, keyword: str, regex: str, reason: str) -> None:
        super().__init__(f"JSON Schema {keyword} {quote_pattern(regex)} cannot be evaluated: {quote_reason(reason)}")
        self.keyword = keyword
        self.regex = regex
        self.reason = reason


class WorkBudgetExceededError(Exception):
    """A value whose validation took more steps (subschema applications, and work inside keywords) than
    its budget allowed."""

    def __init__(self, steps: int, budget: WorkBudget, nodes: int) -> None:
        super().__init__(f"JSON Schema validation exceeded its work budget of {steps} steps "
                         f"({budget.base} plus {budget.per_node} per JSON node, the value having {nodes})")
        self.steps = steps
        self.budget = budget
        self.nodes = nodes


class CircularValueError(ValueError):
    """A value with a container inside itself: not JSON, and it would never end validating."""


@attrs.frozen
class WorkBudget:
    """How much work validating one value may take, in steps (a subschema application, or as much work
    inside keywords): `base` plus `per_node` per JSON node of the value (each object, array, string,
    number, boolean and null counts one; `per_node=0` bounds every value alike). The default is above
    what ordinary schemas use (0.8 to 2.5 steps a node; 5.2 to 8.1 for a `oneOf` of a dozen branches,
    6.7 for the 2020-12 meta-schema; see registry/README.md, Serdes) and refuses a 30-level fan-out
    schema in about 0.2 s. It was 16 a node when a subschema applied cost, and was charged, twice what it
    is now."""

    base: int = attrs.field(default=50_000)
    per_node: int = attrs.field(default=12)

    @base.validator
    @per_node.validator
    def _counted(self, attribute: attrs.Attribute[int], value: int) -> None:
        least = 1 if attribute.name == "base" else 0
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"WorkBudget.{attribute.name} must be an integer of at least {least}, not {value!r}")


DEFAULT_WORK_BUDGET: Final = WorkBudget()

# The checks of a schema the serdes validate against (its patterns compiled, the meta-schema), counted
# over the schema's nodes and those of the schemas it references. The meta-schemas of 2019-09 and
# 2020-12 take 6.7 to 7.6 steps a node of ordinary schemas, up to 22.5 on schemas of many small
# subschemas (`"properties": {"a": true, ...}`; 2019-09, whose `$recursiveRef`s resolve afresh:
# `_RESOLVED`), draft 7 and earlier 1.7 to 2.8 (`bench/registry_json_validation_bench.py --schema-check`);
# over twice the most leaves room and still bounds what a registry's schema costs each consumer in
# proportion to its size.
SCHEMA_CHECK_BUDGET: Final = WorkBudget(per_node=48)


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


# The work of a value is counted in units of about 0.1 us of this machine's CPU (measured with
# bench/registry_json_validation_bench.py; see registry/README.md, Serdes), as it is done: the budget's
# steps are `_STEP` units each, about what applying a subschema of one or two keywords costs.
_STEP: Final = 64
_APPLY: Final = 24  # making the validator of a subschema applied (48 before `_evolve` made it without
# `__init__` and `$ref` resolutions were kept: 2.6 us to 0.6), plus for each of its keywords
_KEYWORD: Final = 8  # (jsonschema reads them all, known or not, and calls the known ones)
_MATCH: Final = 16  # one regex search, and at worst (RE2 leaving its DFA for its NFA: 7 ns a character
_SEARCHED: Final = 16  # and instruction) one unit per this many characters times program instructions
_COMPILE: Final = 256  # compiling a pattern (25 us), plus this many units per program instruction,
_COMPILED: Final = 2  # charged when `_program_size` finds it compiled again
_READ_CHARS: Final = 32  # characters of a `$ref` resolved or a string a format checker reads, per unit
_SEGMENT: Final = 16  # one segment of a `$ref`'s JSON pointer followed (`referencing`: 1.2-1.5 us each)
_FREE_SEGMENTS: Final = 2  # beyond the segments of `#/$defs/name`
# A `$ref` resolved afresh rather than kept (`_validate_reference`: a resolver met for the first time,
# as in a subschema with an `$id`, at each application): `referencing` walks its pointer (2-4 us, what
# `_APPLY` no longer counts), and joins a reference not starting with "#" to the base URI and splits it
# again (3-5 us more). A subschema with an `$id` entering its own resource joins that to the base URI.
_RESOLVED: Final = 32
_JOINED: Final = 48
_SUBRESOURCE: Final = 64
_COMPARED: Final = 6  # one JSON node compared by `enum` or `const`
_COMPARED_CHARS: Final = 1024  # characters of two strings compared equal in length (memcmp)
_HASHED: Final = 24  # one JSON node hashed whole by `uniqueItems`
_TRIVIAL: Final = 4  # a `true` subschema applied (no validator made)
_NAME: Final = 4  # a property name `additionalProperties` or `unevaluatedProperties` goes through
_PASSED: Final = 8  # an error passing one keyword on its way up
_ERROR: Final = 16  # one error made, and one unit per this many characters of its message
_ERROR_CHARS: Final = 4  # (jsonschema's messages quote the value)
_DIGITS: Final = 64  # bits of the numbers `multipleOf` divides, per unit


class _Spending:
    """The work left to one value, in units: `budget.base` steps at first; the value's nodes are counted
    (a walk of it) only when those run out, so ordinary values pay nothing for the bound. A context
    manager (a class rather than a generator: it is entered once per value validated)."""

    __slots__ = ("budget", "documents", "left", "nodes", "quoted", "resolved", "token", "value")

    def __init__(self, value: Any, budget: WorkBudget, documents: bool) -> None:
        self.value = value
        self.documents = documents
        self.budget = budget
        self.left = budget.base * _STEP
        self.nodes: int | None = None
        self.resolved: dict[tuple[int, Any], tuple[Any, Any]] = {}  # `_validate_reference`'s
        self.quoted: dict[tuple[int, int | None], tuple[Any, int]] = {}  # `_quoted_length`'s
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
        """The steps taken so far (the units spent, in steps rounded up)."""
        granted = self.budget.base + (0 if self.nodes is None else self.budget.per_node * self.nodes)
        return -((self.left - granted * _STEP) // _STEP)

    def exhausted(self) -> None:
        """Called when `left` falls below zero: grants the per-node steps once, else refuses."""
        if self.nodes is None:
            self.nodes = sum(map(json_nodes, self.value)) if self.documents else json_nodes(self.value)
            self.left += self.budget.per_node * self.nodes * _STEP
            if self.left >= 0:
                return
        nodes = self.nodes
        raise WorkBudgetExceededError(self.budget.base + self.budget.per_node * nodes, self.budget, nodes)


_SPENDING: Final[contextvars.ContextVar[_Spending | None]] = contextvars.ContextVar("json_validation_spending",
                                                                                    default=None)


def _charge(units: int) -> None:
    """Counts `units` of work against the value being validated, if any."""
    spending = _SPENDING.get()
    if spending is not None:
        spending.left -= units
        if spending.left < 0:
            spending.exhausted()


def within_budget(value: Any, budget: WorkBudget = DEFAULT_WORK_BUDGET, *, documents: bool = False) -> _Spending:
    """A context manager: validating `value` inside it raises `WorkBudgetExceededError` past
    `budget`'s steps; what it gives `as` counts them (`.steps`). With `documents`, `value` is a list of
    JSON documents whose nodes are counted (the list itself none), added to until the budget runs out."""
    return _Spending(value, budget, documents)


class QuotingError(ValidationError):  # type: ignore[misc]  # jsonschema is untyped
    """A jsonschema error whose message quotes values (`[0, 0, ...] is not of type 'object'`), written
    when it is first read: the serdes never read it (their refusal names the path and the constraint), and
    writing it was most of the time a hostile schema took (a fan-out's leaves failing on `[0,0,...]` of
    1 MB: 87 % of 26 s, a repr of the whole value at each error). The message is jsonschema's, from
    `parts`: text, and values quoted (`_Quoted`, `_QuotedTail`). Its length, which the budget charges as
    before, is known without writing it: the repr of a value is measured once per value validated
    (`_quoted_length`). A value changed between validating it and reading the message is quoted as it is
    when read (as `instance` always showed it)."""

    def __init__(self, *parts: str | _Quoted | _QuotedTail, **fields: Any) -> None:
        self._parts = parts
        super().__init__("", **fields)
        self._written: str | None = None  # `_Error.__init__` set it to "" through the setter

    @property
    def message(self) -> str:
        if self._written is None:
            self._written = "".join(part if isinstance(part, str) else part.written() for part in self._parts)
        return self._written

    @message.setter
    def message(self, text: str) -> None:
        self._written = text

    def message_length(self) -> int:
        """`len(self.message)`, the message unwritten."""
        if self._written is not None:
            return len(self._written)
        return sum(len(part) if isinstance(part, str) else part.length() for part in self._parts)


class _Quoted:
    """Values a message quotes: each `repr`, ", " between (as jsonschema lists types and schemas)."""

    __slots__ = ("values",)

    def __init__(self, *values: Any) -> None:
        self.values = values

    def written(self) -> str:
        return ", ".join(repr(value) for value in self.values)

    def length(self) -> int:
        return sum(_quoted_length(value) for value in self.values) + 2 * max(len(self.values) - 1, 0)


class _QuotedTail:
    """The items of the list `items` from `start`, as jsonschema quotes the items a schema does not
    allow: the repr of that slice (`items: false`), or its items' reprs with ", " between
    (`additionalItems: false`), as `repr` writes a list's."""

    __slots__ = ("bracketed", "items", "start")

    def __init__(self, items: list[Any], start: int, *, bracketed: bool) -> None:
        self.items = items
        self.start = start
        self.bracketed = bracketed

    def written(self) -> str:
        tail = self.items[self.start:]
        return repr(tail) if self.bracketed else ", ".join(repr(item) for item in tail)

    def length(self) -> int:
        if type(self.items) is not list:  # a subclass may write itself otherwise
            return len(self.written())
        return _quoted_length(self.items, self.start) - (0 if self.bracketed else 2)


# The reprs of the values quoted are measured once per value validated, those of this many characters
# or more (shorter ones cost about as much to look up), at most `_KEPT_QUOTES` of them.
_KEPT_QUOTE_CHARS: Final = 256
_KEPT_QUOTES: Final = 65_536


def _quoted_length(value: Any, start: int | None = None) -> int:
    """`len(repr(value))`, or of `value[start:]`: kept for the value being validated (`_Spending.quoted`,
    by `id`, the value held beside it so that the `id` is not reused while kept). Values are not changed
    while they are validated."""
    spending = _SPENDING.get()
    kept = None if spending is None else spending.quoted.get((id(value), start))
    if kept is not None and kept[0] is value:
        return int(kept[1])
    length = len(repr(value if start is None else value[start:]))
    if spending is not None and length >= _KEPT_QUOTE_CHARS and len(spending.quoted) < _KEPT_QUOTES:
        spending.quoted[id(value), start] = (value, length)
    return length


def _message_length(error: ValidationError) -> int:
    return error.message_length() if isinstance(error, QuotingError) else len(error.message)


def _compiled(keyword: str, regex: object) -> CompiledPattern:
    if not isinstance(regex, str):
        raise UnevaluablePatternError(keyword, str(regex), "it is not a string")
    try:
        compiled: CompiledPattern = compile_pattern(regex)
    except UnsupportedPatternError as exc:
        raise UnevaluablePatternError(keyword, regex, exc.reason) from None
    return compiled


@functools.lru_cache(maxsize=compile_pattern.cache_parameters()["maxsize"])
def _program_size(regex: str) -> int:
    """The program size of `regex`, compiled: kept for as many patterns as `compile_pattern` keeps (the
    64 used last), so that this misses where it does, and a compilation is charged to the value being
    validated (a schema cycling through more patterns compiles each again at every search, 0.3 ms for a
    large one). Sizes only: the compiled patterns stay within `compile_pattern`'s bound."""
    size = int(compile_pattern(regex).compiled.ProgramSize())
    _charge(_COMPILE + _COMPILED * size)
    return size


def _found(keyword: str, regex: object, text: str) -> bool:
    compiled = _compiled(keyword, regex)
    size = _program_size(compiled.regex)
    # RE2's worst case: its NFA, text times program
    _charge(_MATCH + ((len(text) + 2) * size // _SEARCHED if isinstance(text, str) else 0))
    try:
        return compiled.matches(text, text_kind="a string" if keyword == "pattern" else "a property name")
    except UnsupportedPatternError as exc:
        raise UnevaluablePatternError(keyword, compiled.regex, exc.reason) from None


def _valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def _listed(names: Sequence[Any]) -> str:
    return ", ".join(repr(name) for name in names) + (" was" if len(names) == 1 else " were")


# The keywords. Their error texts are jsonschema's, so messages read as before.

def _pattern(validator: Any, regex: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _found("pattern", regex, instance):
        yield QuotingError(_Quoted(instance), " does not match ", _Quoted(regex))


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
    _charge(_NAME * len(instance))
    if not patterns:
        return [name for name in instance if name not in properties]
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


def _referred(validator: Any, schema: dict[str, Any], draft2019: bool) -> list[tuple[Any, Any]]:
    """(validator, schema) of each schema that `schema`'s `$ref` and `$recursiveRef` (2019-09) or
    `$dynamicRef` (2020-12) resolve to, for the searches of what a schema evaluates."""
    references = []
    if schema.get("$ref") is not None:
        _textual(schema["$ref"])
        _charge(_reference_units(schema["$ref"]) + _fresh_resolution_units(schema["$ref"]))
        references.append(validator._resolver.lookup(schema["$ref"]))
    if draft2019 and "$recursiveRef" in schema:
        references.append(referencing.jsonschema.lookup_recursive_ref(validator._resolver))
    if not draft2019 and schema.get("$dynamicRef") is not None:
        _textual(schema["$dynamicRef"])
        _charge(_reference_units(schema["$dynamicRef"]) + _fresh_resolution_units(schema["$dynamicRef"]))
        references.append(validator._resolver.lookup(schema["$dynamicRef"]))
    return [(validator.evolve(schema=resolved.contents, _resolver=resolved.resolver), resolved.contents)
            for resolved in references]


def _evaluated(validator: Any, instance: Any, schema: Any, draft2019: bool) -> set[str]:
    """The names in `instance` that `schema` evaluates, for `unevaluatedProperties`: jsonschema's
    reading of each draft (in 2019-09, `properties`, `additionalProperties` and
    `unevaluatedProperties` count by their keys, or all names when `true`)."""
    if not isinstance(schema, dict):
        return set()
    _charge(_NAME * len(instance))  # the searches below go through the names
    names: set[str] = set()
    for referred, contents in _referred(validator, schema, draft2019):
        names |= _evaluated(referred, instance, contents, draft2019)
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
        _charge(_NAME * len(instance))
        # Each name once per error, as jsonschema lists them ("'a', 'a' were unevaluated and invalid"):
        # a refused name's subschema evaluated whole, as jsonschema does (it raises on a reference that
        # cannot be resolved further in it).
        refused = [name for name, value in instance.items() if name not in evaluated
                   for _ in validator.descend(value, unevaluated, path=name, schema_path=name)]
        if refused and unevaluated is False:
            yield ValidationError(f"Unevaluated properties are not allowed ({_listed(sorted(refused))} unexpected)")
        elif refused:
            yield ValidationError("Unevaluated properties are not valid under the given schema "
                                  f"({_listed(refused)} unevaluated and invalid)")
    return unevaluated_properties


def _same(one: Any, two: Any, work: list[int]) -> bool:
    """jsonschema's `equal` (1 == 1.0, true != 1, objects whatever their key order), counting in
    `work[0]` the nodes it compares and the characters of equally long strings."""
    work[0] += _COMPARED
    if one is two:
        return True
    kinds = type(one), type(two)
    if kinds[0] in _NUMBERS and kinds[1] in _NUMBERS:
        return bool(one == two)
    if kinds[0] is str or kinds[1] is str or isinstance(one, str) or isinstance(two, str):
        if isinstance(one, str) and isinstance(two, str) and len(one) == len(two):
            work[0] += len(one) // _COMPARED_CHARS
        return bool(one == two)
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(_same(a, b, work) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return len(one) == len(two) and all(key in two and _same(value, two[key], work) for key, value in one.items())
    return bool(_unbool(one) == _unbool(two))


_NUMBERS: Final = frozenset((int, float))  # not bool: true is not 1


_TRUE: Final = object()
_FALSE: Final = object()


def _unbool(value: Any) -> Any:
    return _TRUE if value is True else _FALSE if value is False else value


def _enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    work = [0]
    try:
        found = any(_same(each, instance, work) for each in enums)
    finally:
        _charge(work[0])
    if not found:
        yield QuotingError(_Quoted(instance), " is not one of ", _Quoted(enums))


def _const(validator: Any, const: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    work = [0]
    try:
        same = _same(instance, const, work)
    finally:
        _charge(work[0])
    if not same:
        yield QuotingError(_Quoted(const), " was expected")


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array"):
        # Each item is hashed whole (`unique_items`): a scalar is one node, a container all of its own.
        _charge(_HASHED * sum(json_nodes(item) if isinstance(item, (dict, list)) else 1 for item in instance))
        if repeats(instance):
            yield QuotingError(_Quoted(instance), " has non-unique elements")


def _multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """jsonschema's `multipleOf` (floats divided as floats), exact where the float quotient overflows (a
    large integer over a float divisor, which jsonschema lets escape as `OverflowError`); an infinite or
    NaN value is no multiple."""
    if not validator.is_type(instance, "number"):
        return
    _charge(1 + sum(abs(int(n)).bit_length() for n in (instance, divisor) if isinstance(n, int)) // _DIGITS)
    if isinstance(divisor, float) or isinstance(instance, float):
        try:
            quotient = instance / divisor
            failed = int(quotient) != quotient
        except OverflowError:
            try:
                failed = (Fraction(instance) / Fraction(divisor)).denominator != 1
            except (OverflowError, ValueError):
                failed = True
        except ValueError:  # NaN
            failed = True
    else:
        failed = bool(instance % divisor)
    if failed:
        yield ValidationError(f"{instance!r} is not a multiple of {divisor}")


Keyword = Callable[[Any, Any, Any, Any], Any]


def _first_valid(validator: Any, branches: Any, instance: Any) -> int | None:
    """The index of the first of `branches` that `instance` matches, each left at its first error."""
    for index, subschema in enumerate(branches):
        if _valid(validator.descend(instance, subschema, schema_path=index)):
            return index
    return None


def _any_of(validator: Any, branches: Any, instance: Any, schema: Any) -> Iterator[ValidationError] | None:
    """`anyOf`: jsonschema gathers every error of each branch before the one that matches, to report
    them if none does; this answers by each branch's first error, and gathers the errors (`_gathered`)
    only for a value no branch matches. The same answer and errors, without evaluating whole failing
    branches (which took a `oneOf` of a dozen event types nearly twice the steps). Only where every
    reference resolves (`_references_resolve`): elsewhere the rest of a failing branch can hold one that
    does not, on which jsonschema raises, and each branch is evaluated whole, as jsonschema does."""
    if not _references_resolve(validator):
        return _gathered(validator, branches, instance)
    if _first_valid(validator, branches, instance) is not None:
        return None
    return _gathered(validator, branches, instance)


def _one_of(validator: Any, branches: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """`oneOf`, as `_any_of` (then, as jsonschema, every later branch is tried: one more is an error)."""
    if not _references_resolve(validator):
        return _one_of_whole(validator, branches, instance)
    first = _first_valid(validator, branches, instance)
    if first is None:
        return _gathered(validator, branches, instance)
    return _more_valid(validator, branches, first, instance)


def _one_of_whole(validator: Any, branches: Any, instance: Any) -> Iterator[ValidationError]:
    """jsonschema's `oneOf`: each branch evaluated whole up to the first that matches."""
    errors: list[ValidationError] = []
    for index, subschema in enumerate(branches):
        found = list(validator.descend(instance, subschema, schema_path=index))
        if not found:
            yield from _more_valid(validator, branches, index, instance)
            return
        errors.extend(found)
    yield QuotingError(_Quoted(instance), " is not valid under any of the given schemas", context=errors)


def _gathered(validator: Any, branches: Any, instance: Any) -> Iterator[ValidationError]:
    """jsonschema's error for a value no branch of `anyOf` or `oneOf` matches, every branch's errors its
    context."""
    errors: list[ValidationError] = []
    for index, subschema in enumerate(branches):
        found = list(validator.descend(instance, subschema, schema_path=index))
        if not found:  # matched after all: no error, as jsonschema
            return
        errors.extend(found)
    yield QuotingError(_Quoted(instance), " is not valid under any of the given schemas", context=errors)


def _more_valid(validator: Any, branches: Any, first: int, instance: Any) -> Iterator[ValidationError]:
    more = [each for each in branches[first + 1:] if validator.evolve(schema=each).is_valid(instance)]
    if more:
        yield QuotingError(_Quoted(instance), " is valid under each of ", _Quoted(*more, branches[first]))


# jsonschema's keywords whose messages quote the value (or the schema), the same answers and messages,
# written when read (`QuotingError`): `type` and the size bounds answer in constant time on any value,
# and each of their errors wrote its repr.

def _types_of(types: Any) -> Any:
    return [types] if isinstance(types, str) else types  # jsonschema's `ensure_list`


def _type(validator: Any, types: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    types = _types_of(types)
    if not any(validator.is_type(instance, type) for type in types):
        yield QuotingError(_Quoted(instance), " is not of type ", _Quoted(*types))


def _type_draft3(validator: Any, types: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    types = _types_of(types)
    errors: list[ValidationError] = []
    for index, type in enumerate(types):
        if validator.is_type(type, "object"):
            found = list(validator.descend(instance, type, schema_path=index))
            if not found:
                return
            errors.extend(found)
        elif validator.is_type(instance, type):
            return
    yield QuotingError(_Quoted(instance), " is not of type ", _Quoted(*map(_type_name, types)), context=errors)


def _type_name(type: Any) -> Any:
    """What draft 3's `type` quotes of one of its types: a schema's `name`, else the type itself."""
    try:
        return type["name"]
    except Exception:  # jsonschema's own catch: a string, a schema without a name
        return type


def _disallow_draft3(validator: Any, disallow: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    for disallowed in _types_of(disallow):
        if validator.evolve(schema={"type": [disallowed]}).is_valid(instance):
            yield QuotingError(_Quoted(disallowed), " is disallowed for ", _Quoted(instance))


def _size_bound(kind: str, beyond: str, *, most: bool = False) -> Keyword:
    """`minItems`, `maxLength` and the like: the size of a `kind` value against the least (or `most`); the
    message says `beyond`, or for a least of 1 (a most of 0) that the value should (not) be empty."""
    edge, at_edge = (0, " is expected to be empty") if most else (1, " should be non-empty")

    def size_bound(validator: Any, bound: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        if validator.is_type(instance, kind) and (len(instance) > bound if most else len(instance) < bound):
            yield QuotingError(_Quoted(instance), at_edge if bound == edge else beyond)
    return size_bound


def _not(validator: Any, not_schema: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.evolve(schema=not_schema).is_valid(instance):
        yield QuotingError(_Quoted(instance), " should not be valid under ", _Quoted(not_schema))


def _items(validator: Any, items: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    # 2020-12's `items`, after `prefixItems`
    if not validator.is_type(instance, "array"):
        return
    prefix = len(schema.get("prefixItems", []))
    total = len(instance)
    extra = total - prefix
    if extra <= 0:
        return
    if items is False:
        rest = _QuotedTail(instance, prefix, bracketed=True) if extra != 1 else _Quoted(instance[prefix])
        item = "items" if prefix != 1 else "item"
        yield QuotingError(f"Expected at most {prefix} {item} but found {extra} extra: ", rest)
    else:
        for index in range(prefix, total):
            yield from validator.descend(instance=instance[index], schema=items, path=index)


def _additional_items(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    # before 2020-12, after an array of `items`
    if not validator.is_type(instance, "array") or validator.is_type(schema.get("items", {}), "object"):
        return
    listed = len(schema.get("items", []))
    if validator.is_type(additional, "object"):
        for index, item in enumerate(instance[listed:], start=listed):
            yield from validator.descend(item, additional, path=index)
    elif not additional and len(instance) > listed:
        verb = "was" if len(instance) - listed == 1 else "were"
        yield QuotingError("Additional items are not allowed (", _QuotedTail(instance, listed, bracketed=False),
                           f" {verb} unexpected)")


# jsonschema's keyword functions these stand for, whichever draft's class holds them.
_QUOTING: Final[dict[Any, Keyword]] = {
    jsonschema._keywords.type: _type, jsonschema._legacy_keywords.type_draft3: _type_draft3,
    jsonschema._legacy_keywords.disallow_draft3: _disallow_draft3, jsonschema._keywords.not_: _not,
    jsonschema._keywords.minItems: _size_bound("array", " is too short"),
    jsonschema._keywords.maxItems: _size_bound("array", " is too long", most=True),
    jsonschema._keywords.minLength: _size_bound("string", " is too short"),
    jsonschema._keywords.maxLength: _size_bound("string", " is too long", most=True),
    jsonschema._keywords.minProperties: _size_bound("object", " does not have enough properties"),
    jsonschema._keywords.maxProperties: _size_bound("object", " has too many properties", most=True),
    jsonschema._keywords.items: _items, jsonschema._legacy_keywords.additionalItems: _additional_items,
}


def _sized(keyword: Keyword) -> Keyword:
    """`keyword` charged one unit per entry of its value: `properties`, `required` and the like loop
    over the schema's entries whatever the value holds."""
    def sized(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        # `dependentRequired` and `dependencies` hold lists of names
        _charge(len(value) + sum(len(names) for names in value.values() if isinstance(names, list))
                if isinstance(value, dict) else len(value) if isinstance(value, list) else 0)
        return keyword(validator, value, instance, schema)
    return sized


def _per_item(keyword: Keyword) -> Keyword:
    """`contains`, charged a step per item: it applies its subschema to each item through one validator."""
    def per_item(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, list):
            _charge(_STEP * len(instance))
        return keyword(validator, value, instance, schema)
    return per_item


def _per_char(keyword: Keyword, *, reads_value: bool) -> Keyword:
    """`format` (when a format checker is set: the serdes set none) charged by the length of the string
    it checks, `$ref` by the length of the reference it resolves."""
    def per_char(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _charge(_reference_units(value) if reads_value else
                _MATCH + (len(instance) // _READ_CHARS if isinstance(instance, str) else 0))
        return keyword(validator, value, instance, schema)
    return per_char


def _reference_units(reference: object) -> int:
    """What resolving `reference` costs, in units: its characters read, and each segment of its JSON
    pointer followed (once percent-decoded, as `referencing` splits it): `referencing` walks them one by
    one at every resolution, so a `$ref` 400 segments deep cost 0.5 ms an item for under 2 steps. The
    first `_FREE_SEGMENTS` (`#/$defs/name`) are in the application's own charge, as they were before."""
    if not isinstance(reference, str):
        return _MATCH
    return _string_reference_units(reference)


@functools.lru_cache(maxsize=1_024)
def _string_reference_units(reference: str) -> int:
    # Kept: a schema's references are few and applied again and again (decoding one took 12 % of a `$ref`).
    segments = urllib.parse.unquote(reference).count("/")
    return _MATCH + len(reference) // _READ_CHARS + _SEGMENT * max(segments - _FREE_SEGMENTS, 0)


def _evaluated_items(validator: Any, instance: Any, schema: Any, draft2019: bool) -> set[int] | None:
    """The indexes of the items of `instance` that `schema` evaluates, for `unevaluatedItems`, or None
    for all: jsonschema's reading of each draft, gathered in a set (jsonschema keeps a list and looks
    each index up in it, quadratic in the items)."""
    if not isinstance(schema, dict):
        return set()
    if not draft2019 and "items" in schema:
        return None
    indexes: set[int] = set()
    for referred, contents in _referred(validator, schema, draft2019):
        found = _evaluated_items(referred, instance, contents, draft2019)
        if found is None:
            return None
        indexes |= found
    prefix = schema.get("items") if draft2019 else schema.get("prefixItems")
    if draft2019 and "items" in schema and ("additionalItems" in schema or not isinstance(prefix, list)):
        return None
    if isinstance(prefix, list):
        _charge(len(prefix))
        indexes |= set(range(min(len(prefix), len(instance))))
    branches = []
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            branches.append(schema["if"])
            if "then" in schema:
                branches.append(schema["then"])
        elif "else" in schema:
            branches.append(schema["else"])
    for keyword in ("contains", "unevaluatedItems"):
        if keyword in schema:
            indexes |= {index for index, item in enumerate(instance)
                        if validator.evolve(schema=schema[keyword]).is_valid(item)}
    for keyword in ("allOf", "oneOf", "anyOf"):
        branches.extend(subschema for subschema in schema.get(keyword, [])
                        if _valid(validator.descend(instance, subschema)))
    for branch in branches:
        found = _evaluated_items(validator, instance, branch, draft2019)
        if found is None:
            return None
        indexes |= found
    return indexes


def _unevaluated_items(draft2019: bool) -> Keyword:
    def unevaluated_items(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "array"):
            return
        evaluated = _evaluated_items(validator, instance, schema, draft2019)
        if evaluated is None:
            return
        _charge(len(instance))
        extras = [item for index, item in enumerate(instance) if index not in evaluated]
        if extras:
            yield ValidationError(f"Unevaluated items are not allowed ({_listed(extras)} unexpected)")
    return unevaluated_items


_UNSET: Final = ValidationError("").validator  # what jsonschema leaves in an error its keyword made


def _completed(error: ValidationError, keyword: str, value: Any, instance: Any, schema: Any, type_checker: Any
               ) -> ValidationError:
    """An error a keyword gave, completed as jsonschema completes it, and charged at each keyword it
    passes on its way up (an error deep in the value passes as many: 120,000 errors 400 levels deep took
    44 s in 2.5 steps a node); a new one is charged by its message too: jsonschema's messages quote the
    value (`[0, 0, ...] is not of type 'null'`), which for a large value costs more than the step that
    made it. The message is measured, not written (`QuotingError`)."""
    spending = _SPENDING.get()
    if spending is not None:
        spending.left -= _PASSED + (_ERROR + _message_length(error) // _ERROR_CHARS if error.validator is _UNSET else 0)
        if spending.left < 0:
            spending.exhausted()
    # jsonschema's `_set` fills the fields still unset: a no-op once they are all set, as they are after the
    # first keyword (it took a third of the time of an error passing up)
    if (error.validator is _UNSET or error.validator_value is _UNSET or error.instance is _UNSET
            or error.schema is _UNSET or error._type_checker is _UNSET):
        error._set(validator=keyword, validator_value=value, instance=instance, schema=schema,
                   type_checker=type_checker)
    if keyword not in ("if", "$ref"):
        error.schema_path.appendleft(keyword)
    return error


def _false_schema(instance: Any, schema: Any) -> ValidationError:
    error = QuotingError("False schema does not allow ", _Quoted(instance), validator=None, validator_value=None,
                         instance=instance, schema=schema)
    if _SPENDING.get() is not None:
        _charge(_ERROR + error.message_length() // _ERROR_CHARS)
    return error


def _iter_errors(self: Any, instance: Any, _schema: Any = None) -> Iterator[ValidationError]:
    # jsonschema's `iter_errors`, its errors charged (`_completed`).
    if _schema is not None:  # jsonschema's deprecated form
        yield from self.evolve(schema=_schema).iter_errors(instance)
        return
    schema = self.schema
    if schema is True:
        return
    if schema is False:
        yield _false_schema(instance, schema)
        return
    keywords = getattr(self, "_validators", None)  # newer jsonschema lists them when a validator is made
    if keywords is None:
        keywords = [(self.VALIDATORS[keyword], keyword, value)
                    for keyword, value in type(self)._APPLICABLE_VALIDATORS(schema) if keyword in self.VALIDATORS]
    for keyword_function, keyword, value in keywords:
        for error in keyword_function(self, value, instance, schema) or ():
            yield _completed(error, keyword, value, instance, schema, self.TYPE_CHECKER)


def _descending(specification: Any, applicable: Any) -> Any:
    """jsonschema's `descend` for a class of `specification`'s dialect reading a subschema's keywords
    with `applicable` (the class's own: draft 7 and earlier ignore the siblings of `$ref`), its errors
    charged (`_completed`)."""
    def descend(self: Any, instance: Any, schema: Any, path: Any = None, schema_path: Any = None,
                resolver: Any = None) -> Iterator[ValidationError]:
        if schema is True:  # no validator is made, but `items: true` goes through every item
            _charge(_TRIVIAL)
            return
        if schema is False:
            yield _false_schema(instance, schema)
            return
        if self._ref_resolver is not None:
            evolved = self.evolve(schema=schema)
        else:
            if resolver is None:
                # Only an `$id` (`id` before draft 6) moves the base URI: without either key every
                # dialect's `id_of` answers None and `in_subresource` its resolver as it is.
                if isinstance(schema, dict) and "$id" not in schema and "id" not in schema:
                    resolver = self._resolver
                else:
                    _charge(_SUBRESOURCE)
                    resolver = self._resolver.in_subresource(specification.create_resource(schema))
            evolved = self.evolve(schema=schema, _resolver=resolver)
        for keyword, value in applicable(schema):
            keyword_function = evolved.VALIDATORS.get(keyword)
            if keyword_function is None:
                continue
            for error in keyword_function(evolved, value, instance, schema) or ():
                _completed(error, keyword, value, instance, schema, evolved.TYPE_CHECKER)
                if path is not None:
                    error.path.appendleft(path)
                if schema_path is not None:
                    error.schema_path.appendleft(schema_path)
                yield error
    return descend


def _evolve(self: Any, **changes: Any) -> Any:
    # jsonschema's own `evolve` picks the class of a subschema (or referenced schema) with a `$schema`
    # from its global table: the stock class, whose keywords use `re`. This one keeps to linear time,
    # and counts the step against the value's budget (`within_budget`).
    schema = changes.get("schema", self.schema)
    _charge(_APPLY + (_KEYWORD * len(schema) if isinstance(schema, dict) else 0))
    # `validator_for` answers the default for a boolean schema and one without `$schema`
    cls = validator_class_for(schema, type(self)) if isinstance(schema, dict) and "$schema" in schema else type(self)
    if cls._DIRECT_FIELDS and self._ref_resolver is None and changes.keys() <= _DIRECT_CHANGES:
        # Made without `__init__` (2.6 us, a fifth of a `$ref` applied; this takes 0.4): its
        # `__attrs_post_init__` makes a resolver, which this one has, and lists the schema's keywords,
        # which `_iter_errors` lists itself when they are missing and `descend` reads from the schema.
        evolved = object.__new__(cls)
        evolved.schema = schema
        evolved._ref_resolver = None
        evolved.format_checker = self.format_checker
        evolved._registry = self._registry
        resolver = changes.get("_resolver")
        evolved._resolver = self._resolver if resolver is None else resolver
        return evolved
    changes["schema"] = schema
    for alias, name in type(self)._EVOLVED_FIELDS:
        if alias not in changes:
            changes[alias] = getattr(self, name)
    return cls(**changes)


# The fields (alias, name) `_evolve` sets itself, those of jsonschema's classes since 4.18, and the
# changes it makes so.
_DIRECT: Final = [("schema", "schema"), ("resolver", "_ref_resolver"), ("format_checker", "format_checker"),
                  ("registry", "_registry"), ("_resolver", "_resolver")]
_DIRECT_CHANGES: Final = frozenset(("schema", "_resolver"))


def _validate_reference(self: Any, ref: Any, instance: Any) -> Iterator[ValidationError]:
    # jsonschema's, with each resolution kept for the rest of the value (`_Spending.resolved`): `referencing`
    # walks the pointer again at every application (about half the time of a `$ref` applied, the most
    # frequent step of a fan-out). A `Resolver` is immutable (its base URI, registry and dynamic scope),
    # so its answer to a reference never changes; the answer is kept by the resolver's `id`, the resolver
    # held beside it so that the `id` is not reused while kept.
    if self._ref_resolver is not None:  # jsonschema's deprecated `RefResolver`
        return _LEGACY_REFERENCE(self, ref, instance)  # type: ignore[no-any-return]
    resolver = self._resolver
    _textual(ref)
    spending = _SPENDING.get()
    kept = None if spending is None else spending.resolved.get((id(resolver), ref))
    if kept is not None and kept[0] is resolver:
        resolved = kept[1]
    else:
        _charge(_fresh_resolution_units(ref))
        try:
            resolved = resolver.lookup(ref)
        except referencing.exceptions.Unresolvable as err:
            raise jsonschema.exceptions._WrappedReferencingError(err) from err
        if spending is not None and len(spending.resolved) < _KEPT_RESOLUTIONS:
            spending.resolved[id(resolver), ref] = (resolver, resolved)
    return self.descend(instance, resolved.contents, resolver=resolved.resolver)  # type: ignore[no-any-return]


def _textual(ref: object) -> None:
    """Refuses a reference that is not a string as unresolvable: the meta-schema checks of the serdes do
    not look everywhere a `$ref` can lead (inside a `const`), and `referencing` raised `AttributeError` on
    one (the kept resolutions' table `TypeError`), which went through the serdes past callers catching
    `SerializationError`."""
    if not isinstance(ref, str):
        raise jsonschema.exceptions._WrappedReferencingError(
            referencing.exceptions.Unresolvable(ref=f"({type(ref).__name__}, not a string)"))


def _fresh_resolution_units(ref: object) -> int:
    """What resolving `ref` afresh costs beyond `_reference_units` (`_RESOLVED`, `_JOINED`)."""
    return _RESOLVED + (0 if isinstance(ref, str) and ref.startswith("#") else _JOINED)


# At most this many resolutions are kept per value: a subschema with an `$id` makes a new resolver at
# each application, whose resolutions would otherwise be kept one per application.
_KEPT_RESOLUTIONS: Final = 4_096
_LEGACY_REFERENCE: Final = jsonschema.validators.Draft202012Validator._validate_reference


_LINEAR: dict[Any, Any] = {}
_LINEAR_LOCK = threading.Lock()


def linear_time(cls: Any) -> Any:
    """jsonschema's validator class `cls` with its regex keywords matched in linear time (one class per
    draft, made once; a class this returned is returned as it is)."""
    found = _LINEAR.get(cls)
    if found is not None:
        return found
    with _LINEAR_LOCK:
        found = _LINEAR.get(cls)
        if found is None:
            draft2019 = cls.ID_OF(cls.META_SCHEMA) == _DRAFT2019
            original = cls.VALIDATORS
            keywords: dict[str, Keyword] = {
                keyword: _QUOTING[function] for keyword, function in original.items() if function in _QUOTING}
            keywords |= {
                "pattern": _pattern, "patternProperties": _pattern_properties,
                "additionalProperties": _additional_properties,
                "unevaluatedProperties": _unevaluated_properties(draft2019),
                "unevaluatedItems": _unevaluated_items(draft2019), "uniqueItems": _unique_items,
                "enum": _enum, "const": _const, "multipleOf": _multiple_of}
            for keyword in ("properties", "required", "dependentRequired", "dependentSchemas", "dependencies"):
                if keyword in original:
                    keywords[keyword] = _sized(original[keyword])
            for keyword in ("format", "$ref", "$dynamicRef"):
                if keyword in original:
                    keywords[keyword] = _per_char(original[keyword], reads_value=keyword != "format")
            if "contains" in original:
                keywords["contains"] = _per_item(original["contains"])
            keywords.update({"anyOf": _any_of, "oneOf": _one_of})
            found = jsonschema.validators.extend(
                cls, validators={k: v for k, v in keywords.items() if k in cls.VALIDATORS})
            found.evolve = _evolve
            found._EVOLVED_FIELDS = [(field.alias, field.name) for field in attrs.fields(found) if field.init]
            found._DIRECT_FIELDS = found._EVOLVED_FIELDS == _DIRECT
            found.iter_errors = _iter_errors
            found._validate_reference = _validate_reference
            found.descend = _descending(_specification(cls), found._APPLICABLE_VALIDATORS)
            _LINEAR[cls] = _LINEAR[found] = found
        return found


def _specification(cls: Any) -> Any:
    """The `referencing` specification of `cls`'s dialect, as jsonschema's classes read their schemas."""
    return referencing.jsonschema.specification_with(dialect_id=cls.ID_OF(cls.META_SCHEMA) or "urn:unknown-dialect",
                                                     default=referencing.Specification.OPAQUE)


def validator_with(cls: Any, schema: Any, resources: list[tuple[str, referencing.Resource[Any]]],
                   **fields: Any) -> Any:
    """`cls(schema, registry=..., **fields)` of `resources` (and the meta-schemas, as jsonschema adds
    them), its registry searched once for the `$id`s and `$anchor`s of the schema and the resources:
    jsonschema searches the whole schema at each `$ref` to one (a `$ref` to an `$id` beside 10,000
    definitions took 77 ms an application), as its registry of what it found is not kept from one
    reference to the next. Its references are resolved once too (`_references_resolve`)."""
    root = _specification(cls).create_resource(schema)
    uri = root.id() or ""
    registry = jsonschema_specifications.REGISTRY.combine(referencing.Registry().with_resources(resources))
    try:
        crawled = registry.with_resource(uri, root).crawl()
    except (AttributeError, TypeError):  # a malformed keyword in a referenced schema: searched when reached
        return cls(schema, registry=referencing.Registry().with_resources(resources), **fields)
    resolver = crawled.resolver(base_uri=uri)
    if _all_resolve([(root, resolver)] + [(resource, crawled.resolver(base_uri=name)) for name, resource in resources]):
        _RESOLVING[id(crawled)] = crawled
    return cls(schema, _resolver=resolver, **fields)


# The registries (by `id`, while they live) of validators in which every reference their evaluation can
# reach resolves (`_all_resolve`), which `anyOf` and `oneOf` may leave a failing branch at its first
# error in (`_any_of`). jsonschema raises on a reference that cannot be resolved when it reaches it, and
# evaluates every branch of `anyOf` and `oneOf` whole up to the one that matches: a branch left at its
# first error would never reach one further in, and answer where jsonschema raises (an `anyOf` whose
# failing first branch holds a `$dynamicRef` to an anchor its resource lacks, its second branch matching:
# valid, where jsonschema raises `NoSuchAnchor`). Any other validator evaluates every branch whole.
_RESOLVING: Final[weakref.WeakValueDictionary[int, referencing.Registry[Any]]] = weakref.WeakValueDictionary()


def _references_resolve(validator: Any) -> bool:
    """Whether every reference `validator`'s evaluation can reach resolves: its registry is one of
    `_RESOLVING`'s (`referencing` answers a reference in the registry it was looked up in when found
    there; where it moves to another, as for an anchor found under a resource's `$id` rather than the
    name it was fetched by, branches are evaluated whole)."""
    registry = getattr(validator._resolver, "_registry", None) if validator._ref_resolver is None else None
    return registry is not None and _RESOLVING.get(id(registry)) is registry


_REFERENCES: Final = ("$ref", "$dynamicRef")


def _all_resolve(roots: list[tuple[referencing.Resource[Any], Any]]) -> bool:
    """Whether every `$ref` and `$dynamicRef` in the resources `roots` (each with its resolver), their
    subschemas and the subschemas the references lead to resolves. A reference is read from its
    subschema's base URI (`referencing`'s resolver), so each subschema is looked at once per base URI
    it can be evaluated from: its own, and the one each reference to it leads to. A `$dynamicRef`
    (2020-12) first resolves as a `$ref` does (which can fail), then moves to the outermost
    `$dynamicAnchor` of that name in the dynamic scope (which cannot): each resource with one is looked
    at too, from the base URI of the reference (`referencing` keeps it for one without `$id`), whatever
    the scope. (`$recursiveRef`, 2019-09, reads "#" and the base URIs of the scope: resources of the
    registry, which resolve.) Not proven (False) on anything malformed, and past `_WALKED` per
    subschema (a schema whose `$dynamicRef`s reach many resources from many base URIs): such a
    validator evaluates branches whole, as jsonschema does. The pointers followed are at most the
    references' characters."""
    # (subschema, resolver, its specification, whether the resolver is the subschema's already: a
    # resource's own, or a reference's answer; else its parent's, which an `$id` moves as `descend` does)
    pending = [(resource.contents, resolver, resource._specification, True) for resource, resolver in roots]
    seen: set[tuple[int, str]] = set()
    nodes: dict[int, Any] = {}  # what `seen` names by `id`, kept alive while it is used
    dynamic: dict[Any, Any] = {}  # `_dynamic_targets`' (registry, reference URI, name) done, and anchors by name
    try:
        while pending:
            node, resolver, spec, entered = pending.pop()
            if not isinstance(node, dict):
                continue
            if isinstance(node.get("$schema"), str):
                spec = referencing.jsonschema.specification_with(node["$schema"], default=spec)
            if not entered:
                resolver = resolver.in_subresource(spec.create_resource(node))
            key = (id(node), resolver._base_uri)
            if key in seen:
                continue
            seen.add(key)
            nodes[id(node)] = node
            if len(seen) > _WALKED * len(nodes) + _WALKED_FREE:
                return False
            for keyword in _REFERENCES:
                if keyword in node:
                    ref = node[keyword]
                    if not isinstance(ref, str):
                        return False
                    resolved = resolver.lookup(ref)
                    pending.append((resolved.contents, resolved.resolver, spec, True))
                    if keyword == "$dynamicRef":
                        pending.extend(_dynamic_targets(resolver, ref, spec, dynamic))
            pending.extend((child, resolver, spec, False) for child in spec.subresources_of(node))
    except (referencing.exceptions.Unresolvable, AttributeError, TypeError, LookupError, ValueError):
        return False
    return True


_WALKED: Final = 4  # base URIs a subschema is looked at from, on average, before `_all_resolve` gives up
_WALKED_FREE: Final = 10_000


def _dynamic_targets(resolver: Any, ref: str, spec: Any, done: dict[Any, Any]) -> list[Any]:
    """What the `$dynamicRef` `ref` can lead to, for `_all_resolve`: each `$dynamicAnchor` of its name in
    the registry, with the resolver `referencing` gives it (its `DynamicAnchor.resolve`: the reference's
    URI as base, moved by the target's `$id`). Once per registry, URI and name; `done` also holds each
    registry's dynamic anchors by name, listed once."""
    if ref.startswith("#"):
        uri, name = resolver._base_uri, ref[1:]
    else:
        uri, name = urllib.parse.urldefrag(urllib.parse.urljoin(resolver._base_uri, ref))
    registry = resolver._registry
    if not name or name.startswith("/") or (id(registry), uri, name) in done:
        return []
    done[id(registry), uri, name] = registry  # (kept alive: its `id` names it)
    anchors = done.get(id(registry))
    if anchors is None:
        anchors = done[id(registry)] = {}
        for (_, anchor_name), anchor in registry._anchors.items():
            if isinstance(anchor, referencing.jsonschema.DynamicAnchor):
                anchors.setdefault(anchor_name, []).append(anchor.resource)
    at = registry.resolver(base_uri=uri)
    return [(resource.contents, at.in_subresource(resource), spec, True) for resource in anchors.get(name, ())]


def validator_class_for(schema: Any, default: Any = None) -> Any:
    """The linear-time validator class for `schema`: its `$schema`'s draft, else `default`'s (an unknown
    `$schema` too); with no `default` 2020-12, as jsonschema (which warns of an unknown `$schema`). A
    `$schema` that is no string takes the default, for the meta-schema check to refuse (jsonschema's
    `validator_for` raised `TypeError` or `AttributeError` on it)."""
    if isinstance(schema, dict) and not isinstance(schema.get("$schema", ""), str):
        return linear_time(default or jsonschema.validators.validator_for({}))
    if default is None:
        return linear_time(jsonschema.validators.validator_for(schema))
    return linear_time(jsonschema.validators.validator_for(schema, default=default))


def check_schema(cls: Any, schema: Any) -> None:
    """`cls.check_schema(schema)` (`SchemaError` at the first error), with the meta-schema's keywords
    in linear time and its `regex` format (every `pattern` and `patternProperties` name) read by RE2:
    the patterns Java and RE2 accept (`\\p{L}`), not the ones Python's `re` compiles."""
    for error in _meta_validator(cls).iter_errors(schema):
        raise jsonschema.exceptions.SchemaError.create_from(error)


@functools.cache
def _meta_validator(cls: Any) -> Any:
    """The validator of `cls`'s meta-schema `check_schema` uses, made once per class (`validator_with`:
    its references proven to resolve, its registry searched once)."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {**cls.FORMAT_CHECKER.checkers, "regex": (_sized_pattern, UnevaluablePatternError)}
    meta = linear_time(jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls))
    return validator_with(meta, cls.META_SCHEMA, [], format_checker=checker)


def _sized_pattern(regex: object) -> bool:
    """Whether `regex` can be evaluated (else `UnevaluablePatternError`), its compilation charged to the
    schema being checked (`_program_size`: a pattern can take 0.3 ms to compile, its text a few bytes)."""
    _program_size(_compiled("pattern", regex).regex)
    return True


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
            _program_size(_compiled("pattern", node["pattern"]).regex)
        if isinstance(node.get("patternProperties"), dict):
            for regex in node["patternProperties"]:
                _program_size(_compiled("patternProperties", regex).regex)
        try:
            pending.extend((child, spec) for child in spec.subresources_of(node))
        except (AttributeError, TypeError):  # a malformed keyword; the validator meets it when evaluating
            continue
