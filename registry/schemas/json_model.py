"""The typed view of a JSON schema that Confluent's JSON Schema diff walks.

Confluent compares schemas as the everit-json-schema library loads them, and that loading decides
many verdicts, so this module reproduces it:

* `true` / `false` / `{}` are TRUE / FALSE / EMPTY schemas; a `$ref` is followed (the node is the
  referred schema, shared, so recursion is detected by identity);
* `enum`, `allOf`/`anyOf`/`oneOf`, `not`, `const` and the type (explicit `type`, or sniffed from
  type-specific keywords when `type` is absent) each yield a schema; several of them together are
  a synthetic `allOf` of those schemas (in that order); none is EMPTY;
* a list of types is a synthetic `anyOf` with one schema per type, each seeing every keyword;
* `id`/`$id`, `title`, `description` and `default` belong to the resulting schema.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import unquote, urljoin

import re2
from re2 import _re2

_MISSING = object()

_ARRAY_KEYWORDS = ("items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains", "prefixItems")
_OBJECT_KEYWORDS = ("properties", "required", "minProperties", "maxProperties", "dependencies",
                    "patternProperties", "additionalProperties", "propertyNames", "dependentRequired",
                    "dependentSchemas")
_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format")


@dataclass(eq=False)
class Node:
    """One everit-style schema. `kind` is the everit class: STRING, NUMBER, BOOLEAN, NULL, OBJECT,
    ARRAY, ENUM, CONST, NOT, COMBINED, EMPTY, TRUE, FALSE, CONDITIONAL."""

    kind: str
    key_source: Any = None  # what the structural identity is computed from (lazily: it is rarely needed)
    id: Any = None
    title: Any = None
    description: Any = None
    default: Any = _MISSING
    connect_type: str | None = None  # Kafka Connect's "connect.type" annotation
    # string
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    # number
    minimum: Any = None
    maximum: Any = None
    exclusive_minimum: Any = None
    exclusive_maximum: Any = None
    multiple_of: Any = None
    requires_integer: bool = False
    # object
    properties: dict[str, Node] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    additional_properties: bool = True
    additional_properties_schema: Node | None = None
    pattern_properties: list[tuple[str, Node]] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    schema_dependencies: dict[str, Node] = field(default_factory=dict)
    min_properties: int | None = None
    max_properties: int | None = None
    # array
    all_items: Node | None = None
    item_list: list[Node] | None = None
    additional_items: bool = True
    additional_items_schema: Node | None = None
    min_items: int | None = None
    max_items: int | None = None
    unique_items: bool = False
    # enum / const
    values: list[Any] = field(default_factory=list)
    # not
    must_not: Node | None = None
    # combined
    criterion: str = ""
    subschemas: list[Node] = field(default_factory=list)

    @property
    def key(self) -> str:
        """Structural identity, for collapsing duplicate subschemas of a combined schema."""
        return _canonical_key(self.key_source)

    @property
    def has_default(self) -> bool:
        return self.default is not _MISSING

    def is_empty_like(self) -> bool:
        return self.kind in ("EMPTY", "TRUE")


class SchemaLoadError(Exception):
    """A reference that cannot be followed, or a malformed keyword."""


def _canonical_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class Loader:
    """Loads nodes from a root document and the documents of its references, caching each
    (document, JSON pointer) so that references share one node."""

    def __init__(self, root: Any, referenced: Mapping[str, Any]) -> None:
        self.root = root
        self.referenced = referenced
        self._cache: dict[tuple[int, str], Node] = {}
        # Draft 2019-09/2020-12 documents: Confluent translates them into the same model
        # (prefixItems are the tuple items, `items` next to them is the additional-items schema,
        # dependentRequired/dependentSchemas are the dependencies, `$id` is not compared).
        dialect = root.get("$schema") if isinstance(root, dict) else None
        self.modern = isinstance(dialect, str) and ("2020-12" in dialect or "2019-09" in dialect)

    def load(self) -> Node:
        return self._load(self.root, self.root, "#")

    def _resolve(self, doc: Any, ref: str) -> tuple[Any, Any, str]:
        """(document, node, pointer) that `ref` names, seen from `doc`."""
        target_doc = doc
        base, _, fragment = ref.partition("#")
        if base:
            found = self._document(doc, base)
            if found is _MISSING:
                raise SchemaLoadError(f"Unresolvable reference: {ref}")
            target_doc = found
        node = target_doc
        pointer = "#"
        if fragment:
            for raw in fragment.lstrip("/").split("/"):
                if raw == "":
                    continue
                token = unquote(raw).replace("~1", "/").replace("~0", "~")
                pointer += "/" + token
                if isinstance(node, dict) and token in node:
                    node = node[token]
                elif isinstance(node, list) and token.isascii() and token.isdigit() and int(token) < len(node):
                    node = node[int(token)]
                else:
                    raise SchemaLoadError(f"Unresolvable reference: {ref}")
        return target_doc, node, pointer

    def _document(self, doc: Any, base: str) -> Any:
        """The referenced document `base` names: by reference name as given, resolved against
        the referring document's `$id`, or by its last path segment."""
        if base in self.referenced:
            return self.referenced[base]
        own_id = doc.get("$id", doc.get("id")) if isinstance(doc, dict) else None
        candidates = []
        if isinstance(own_id, str):
            candidates.append(urljoin(own_id, base))
        candidates.append(base.rsplit("/", 1)[-1])
        for candidate in candidates:
            if candidate in self.referenced:
                return self.referenced[candidate]
            for name, document in self.referenced.items():
                if name.rsplit("/", 1)[-1] == candidate:
                    return document
        if isinstance(own_id, str) and urljoin(own_id, base) == own_id:
            return doc
        return _MISSING

    def _load(self, doc: Any, raw: Any, pointer: str) -> Node:
        key = (id(doc), pointer)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        if raw is True:
            node = Node("TRUE", key_source=True)
        elif raw is False:
            node = Node("FALSE", key_source=False)
        elif not isinstance(raw, dict):
            raise SchemaLoadError(f"Not a schema at {pointer}")
        elif "$ref" in raw and isinstance(raw["$ref"], str):
            target_doc, target, target_pointer = self._resolve(doc, raw["$ref"])
            if target_doc is doc and target_pointer == pointer:
                raise SchemaLoadError(f"Reference to itself at {pointer}")
            # Placeholder first so that a cycle through this reference finds a node.
            placeholder = Node("EMPTY")
            self._cache[key] = placeholder
            node = self._load(target_doc, target, target_pointer)
            self._cache[key] = node
            return node
        else:
            node = Node("EMPTY")
            self._cache[key] = node
            built = self._load_object(doc, raw, pointer)
            node.__dict__.update(built.__dict__)
            return node
        self._cache[key] = node
        return node

    def _child(self, doc: Any, raw: Any, pointer: str) -> Node:
        return self._load(doc, raw, pointer)

    def _load_object(self, doc: Any, raw: dict[str, Any], pointer: str) -> Node:
        parts: list[Node] = []
        if "enum" in raw and isinstance(raw["enum"], list):
            parts.append(Node("ENUM", key_source=({"enum": raw["enum"]}), values=list(raw["enum"])))
        for criterion in ("allOf", "anyOf", "oneOf"):
            if criterion in raw and isinstance(raw[criterion], list):
                subs = [self._child(doc, s, f"{pointer}/{criterion}/{i}") for i, s in enumerate(raw[criterion])]
                parts.append(Node("COMBINED", key_source=({criterion: raw[criterion]}),
                                  criterion=criterion, subschemas=subs))
        if "not" in raw:
            parts.append(Node("NOT", key_source=({"not": raw["not"]}),
                              must_not=self._child(doc, raw["not"], f"{pointer}/not")))
        if "const" in raw:
            parts.append(Node("CONST", key_source=({"const": raw["const"]}), values=[raw["const"]]))
        type_value = raw.get("type", _MISSING)
        if isinstance(type_value, str):
            parts.append(self._typed(doc, raw, pointer, type_value, explicit=True))
        elif isinstance(type_value, list):
            subs = [self._typed(doc, raw, pointer, t, explicit=True) for t in type_value if isinstance(t, str)]
            parts.append(Node("COMBINED", key_source=({"type": type_value, "raw": raw}),
                              criterion="anyOf", subschemas=subs))
        else:
            for kind, keywords in (("ARRAY", _ARRAY_KEYWORDS), ("OBJECT", _OBJECT_KEYWORDS),
                                   ("NUMBER", _NUMBER_KEYWORDS), ("STRING", _STRING_KEYWORDS)):
                if any(k in raw for k in keywords):
                    parts.append(self._typed(doc, raw, pointer, kind.lower(), explicit=False))
        if any(k in raw for k in ("if", "then", "else")):
            parts.append(Node("CONDITIONAL", key_source=({k: raw.get(k) for k in ("if", "then", "else")})))
        if not parts:
            result = Node("EMPTY", key_source=raw)
        elif len(parts) == 1:
            result = parts[0]
            result.key_source = raw
        else:
            result = Node("COMBINED", key_source=raw, criterion="allOf", subschemas=parts)
        result.id = None if self.modern else raw.get("$id", raw.get("id"))
        result.title = raw.get("title")
        result.description = raw.get("description")
        result.connect_type = raw.get("connect.type") if isinstance(raw.get("connect.type"), str) else None
        result.default = raw.get("default", _MISSING)
        return result

    def _typed(self, doc: Any, raw: dict[str, Any], pointer: str, type_name: str, *, explicit: bool) -> Node:
        key = {"type": type_name, "raw": raw}
        if type_name == "string":
            return Node("STRING", key_source=key, min_length=_int(raw.get("minLength")),
                        max_length=_int(raw.get("maxLength")),
                        pattern=raw.get("pattern") if isinstance(raw.get("pattern"), str) else None)
        if type_name in ("number", "integer"):
            minimum, maximum = _number(raw.get("minimum")), _number(raw.get("maximum"))
            exclusive_min, exclusive_max = raw.get("exclusiveMinimum"), raw.get("exclusiveMaximum")
            return Node("NUMBER", key_source=key, minimum=minimum, maximum=maximum,
                        exclusive_minimum=_number(exclusive_min), exclusive_maximum=_number(exclusive_max),
                        multiple_of=_number(raw.get("multipleOf")), requires_integer=type_name == "integer")
        if type_name == "boolean":
            return Node("BOOLEAN", key_source=key)
        if type_name == "null":
            return Node("NULL", key_source=key)
        if type_name == "object":
            return self._object(doc, raw, pointer, key)
        if type_name == "array":
            return self._array(doc, raw, pointer, key)
        raise SchemaLoadError(f"Unknown type {type_name!r} at {pointer}")

    def _object(self, doc: Any, raw: dict[str, Any], pointer: str, key: Any) -> Node:
        node = Node("OBJECT", key_source=key)
        props = raw.get("properties")
        if isinstance(props, dict):
            for name, sub in props.items():
                node.properties[name] = self._child(doc, sub, f"{pointer}/properties/{_escape(name)}")
        required = raw.get("required")
        if isinstance(required, list):
            node.required = [r for r in required if isinstance(r, str)]
        additional = raw.get("additionalProperties", _MISSING)
        if additional is False:
            node.additional_properties = False
        elif isinstance(additional, dict):
            node.additional_properties_schema = self._child(doc, additional, f"{pointer}/additionalProperties")
        patterns = raw.get("patternProperties")
        if isinstance(patterns, dict):
            for regex, sub in patterns.items():
                node.pattern_properties.append(
                    (regex, self._child(doc, sub, f"{pointer}/patternProperties/{_escape(regex)}"))
                )
        dependencies = raw.get("dependencies")
        if self.modern:
            required_deps, schema_deps = raw.get("dependentRequired"), raw.get("dependentSchemas")
            dependencies = {**(schema_deps if isinstance(schema_deps, dict) else {}),
                            **(required_deps if isinstance(required_deps, dict) else {})}
        if isinstance(dependencies, dict):
            for name, dep in dependencies.items():
                if isinstance(dep, list):
                    node.property_dependencies[name] = [d for d in dep if isinstance(d, str)]
                else:
                    node.schema_dependencies[name] = self._child(
                        doc, dep, f"{pointer}/{'dependentSchemas' if self.modern else 'dependencies'}/{_escape(name)}"
                    )
        node.min_properties = _int(raw.get("minProperties"))
        node.max_properties = _int(raw.get("maxProperties"))
        return node

    def _array(self, doc: Any, raw: dict[str, Any], pointer: str, key: Any) -> Node:
        node = Node("ARRAY", key_source=key)
        items = raw.get("items", _MISSING)
        if self.modern:
            prefix = raw.get("prefixItems")
            if isinstance(prefix, list):
                node.item_list = [self._child(doc, s, f"{pointer}/prefixItems/{i}") for i, s in enumerate(prefix)]
            if items is False:
                node.additional_items = False
            elif items is not True and items is not _MISSING:
                if node.item_list:
                    node.additional_items_schema = self._child(doc, items, f"{pointer}/items")
                else:
                    node.all_items = self._child(doc, items, f"{pointer}/items")
            additional: Any = _MISSING
        elif isinstance(items, list):
            node.item_list = [self._child(doc, s, f"{pointer}/items/{i}") for i, s in enumerate(items)]
            additional = raw.get("additionalItems", _MISSING)
        else:
            if items is not _MISSING:
                node.all_items = self._child(doc, items, f"{pointer}/items")
            additional = raw.get("additionalItems", _MISSING)
        if additional is False:
            node.additional_items = False
        elif isinstance(additional, dict):
            node.additional_items_schema = self._child(doc, additional, f"{pointer}/additionalItems")
        node.min_items = _int(raw.get("minItems"))
        node.max_items = _int(raw.get("maxItems"))
        node.unique_items = raw.get("uniqueItems") is True
        return node


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        return None


# `patternProperties` regexes and the property names they are matched against both come from
# callers' schemas. Python's `re` backtracks while holding the interpreter lock (`^(a+)+$` against a
# 40-character name would stall the whole process for days), so they are matched with RE2: linear in
# the name for a given pattern, and the lock is released while it searches. RE2 refuses what it
# cannot do in linear time (backreferences, lookaround) and patterns over `max_mem`; its errors are
# not logged (a caller could otherwise write a stderr line per request).
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.never_capture = True  # only "found or not" is asked: groups would cost a slower engine
_MAX_MEM = 1 << 20
_RE2_OPTIONS.max_mem = _MAX_MEM  # 8 MiB by default
# One RE2 object grows to about `max_mem` (its programs, then the DFA states its searches add), so
# `compile_pattern` keeps this many bytes' worth of compiled patterns, least recently used first out.
PATTERN_CACHE_BYTES = 64 << 20
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_NO_MATCH = (-1, -1)
# Worst case of an RE2 search (its NFA): about 5 ns per byte of the name and instruction of the
# program; one unit of the work budget (`registry.compat.work_budget`) is about 9 us, 2,000 steps.
_STEPS_PER_UNIT = 2_000
_COMPILE_CHARACTERS_PER_UNIT = 20  # checking and compiling a pattern: about 0.4 us a character
_QUOTED = 120  # characters of a pattern quoted in an error
_REASON_CHARS = 200  # of why a pattern cannot be evaluated: RE2's reason quotes the pattern from where it stopped


class UnsupportedPatternError(SchemaLoadError):
    """A `patternProperties` regex the registry cannot evaluate safely, or a property name it cannot
    be matched against. A compatibility check that needs it cannot decide, and must not guess.
    `regex` and `reason` let other users of `compile_pattern` name the keyword the pattern came from."""

    def __init__(self, regex: str, reason: str) -> None:
        super().__init__(f"patternProperties pattern {quote_pattern(regex)} cannot be evaluated: "
                         f"{quote_reason(reason)}")
        self.regex = regex
        self.reason = reason


def quote_pattern(regex: str) -> str:
    """`regex` as a JSON string for an error message, cut short when long."""
    text = regex if len(regex) <= _QUOTED else regex[:_QUOTED] + "..."
    return json.dumps(text)


def quote_reason(reason: str) -> str:
    """Why a pattern cannot be evaluated, for an error message, cut short when long (RE2's reason quotes
    the pattern from where it stopped, `missing ): (((...`, up to all of it)."""
    return reason if len(reason) <= _REASON_CHARS else reason[:_REASON_CHARS] + "..."


def _unsupported(regex: str, why: str) -> UnsupportedPatternError:
    return UnsupportedPatternError(regex, why)


_SPACE = {("s", False): "[[:space:]]", ("s", True): "[:space:]", ("S", False): "[^[:space:]]",
          ("S", True): "[:^space:]"}


def _for_re2(regex: str) -> tuple[str, str | None, bool]:
    """`regex` in RE2's syntax with Java's meaning, the same with each `$` written `(?m:$)` (None
    when it has no `$`), and whether each `$` ends an alternative of the whole pattern (with no `\\z`
    anywhere); `UnsupportedPatternError` where Java, RE2 and Python read the same text differently
    (each would give its own verdict, so none is taken)."""
    out: list[str | None] = []  # None: a `$`
    i, n, in_class, class_start = 0, len(regex), False, 0
    depth, dollars_end_alternatives = 0, True
    while i < n:
        c = regex[i]
        if c == "\\" and i + 1 < n:
            nxt = regex[i + 1]
            if nxt == "z":
                dollars_end_alternatives = False
            if nxt == "Q":  # \Q...\E quotes literally, in a class too; RE2 reads it as Java does
                end = regex.find("\\E", i + 2)
                stop = n if end < 0 else end + 2
                out.append(regex[i:stop])
                i = stop
                continue
            digits = regex[i + 2:i + 6]
            if nxt == "u" and len(digits) == 4 and all(d in "0123456789abcdefABCDEF" for d in digits):
                out.append(f"\\x{{{digits}}}")  # Java's (and Python's) \uXXXX; RE2 spells it \x{XXXX}
                i += 6
                continue
            if nxt in "sS":  # Java's (and Python's) \s has \x0B, RE2's not; its POSIX [:space:] has
                out.append(_SPACE[nxt, in_class])
            else:
                out.append(regex[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]" and i > class_start:
                in_class = False
            elif c == "[":
                raise _unsupported(regex, "'[' inside a character class is a nested class in Java, a POSIX "
                                          "class in RE2 and a literal in Python")
            elif c == "&" and regex.startswith("&&", i):
                raise _unsupported(regex, "'&&' inside a character class is an intersection in Java only")
        elif c == "[":
            in_class = True
            class_start = i + 2 if regex.startswith("^", i + 1) else i + 1  # a first ']' is literal
        elif c == "{" and regex.startswith(",", i + 1):
            raise _unsupported(regex, "'{,n}' is a repetition in Python, a literal in RE2 and an error in Java")
        elif c in "()":
            depth += 1 if c == "(" else -1
        elif c == "$":
            out.append(None)
            dollars_end_alternatives &= depth == 0 and (i + 1 == n or regex[i + 1] == "|")
            i += 1
            continue
        out.append(c)
        i += 1
    plain = "".join("$" if part is None else part for part in out)
    if None not in out:
        return plain, None, False
    return plain, "".join("(?m:$)" if part is None else part for part in out), dollars_end_alternatives


@dataclass(frozen=True, slots=True)
class CompiledPattern:
    """A `patternProperties` regex compiled for `Pattern.matcher(name).find()`."""

    regex: str
    compiled: Any = field(repr=False)
    before_final_newline: str | None  # for a name ending in its only "\n": see `matches`
    dollars_end_alternatives: bool = False  # for a name ending in "\n": see `matches`

    def cost(self, name: str) -> int:
        """Units of the compatibility work budget one `matches(name)` may take at worst (for a name
        ending in "\n", two searches, or one with the other form of the pattern, compiled then and
        not kept)."""
        steps = (len(name.encode("utf-8", "surrogatepass")) + 2) * int(self.compiled.ProgramSize())
        if self.before_final_newline is not None and name.endswith("\n"):
            if self.dollars_end_alternatives:
                return 1 + 2 * steps // _STEPS_PER_UNIT
            return 1 + compile_cost(self.regex) + steps // _STEPS_PER_UNIT
        return 1 + steps // _STEPS_PER_UNIT

    def matches(self, name: str, *, text_kind: str = "a property name") -> bool:
        """Whether `regex` is found in `name`; `text_kind` says what `name` is in a refusal."""
        compiled = self.compiled
        try:
            text = name.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: RE2 matches UTF-8 only
            raise _unsupported(self.regex, f"{text_kind} it is matched against is not valid Unicode "
                                           "(a lone surrogate)") from None
        if self.before_final_newline is not None and name.endswith("\n"):
            # Java's and Python's `$` (without MULTILINE) also match just before a final "\n", RE2's
            # only at the very end. When each `$` ends an alternative of the whole pattern, a match
            # using one before that "\n" ends there: it is a match of the pattern in the name without
            # its "\n" (nothing else in the match can tell the two apart, `\z` aside). Otherwise, while
            # that "\n" is the name's only one, RE2's multi-line `$` is exactly theirs; with others
            # before it, nothing in RE2 is.
            if self.dollars_end_alternatives:
                return _found(compiled, text) or _found(compiled, text[:-1])
            if "\n" in name[:-1]:
                raise _unsupported(self.regex, f"'$' against {text_kind} with several line breaks ending in one")
            compiled = _compile(self.regex, self.before_final_newline)
        return _found(compiled, text)


def _found(compiled: Any, text: bytes) -> bool:
    return bool(compiled.Match(_UNANCHORED, text, 0, len(text))[0] != _NO_MATCH)


def _compile(regex: str, translated: str) -> Any:
    # The RE2 object itself, as `re2.compile` makes it inside: so that re2's module cache (128 patterns
    # whatever their size) keeps none alive beyond `compile_pattern`'s bounded one, and so that a search
    # is one call answering spans (re2's Python match objects cost ten times an ordinary search).
    try:
        compiled = _re2.RE2(translated.encode("utf-8"), _RE2_OPTIONS)
    except UnicodeEncodeError:
        raise _unsupported(regex, "it is not valid Unicode (a lone surrogate)") from None
    if not compiled.ok():
        reason = compiled.error()
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise _unsupported(regex, f"the linear-time engine (RE2) rejects it: {text}")
    return compiled


@functools.lru_cache(maxsize=PATTERN_CACHE_BYTES // _MAX_MEM)
def compile_pattern(regex: str) -> CompiledPattern:
    """The compiled `regex`; `UnsupportedPatternError` (naming it and why) when it cannot be evaluated
    in linear time with Java's meaning. Recently used patterns are cached (refusals are not)."""
    plain, before_final_newline, dollars_end_alternatives = _for_re2(regex)
    return CompiledPattern(regex, _compile(regex, plain), before_final_newline, dollars_end_alternatives)


def compile_cost(regex: str) -> int:
    """Units of the compatibility work budget `compile_pattern(regex)` may take."""
    return 1 + len(regex) // _COMPILE_CHARACTERS_PER_UNIT
