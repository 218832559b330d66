"""Kafka's `ssl.principal.mapping.rules` (KIP-371, `SslPrincipalMapper`): from a client certificate's
subject DN to the principal name.

Rules are `DEFAULT` (the DN itself) or `RULE:pattern/replacement/` with an optional `L` or `U` (lower- or
upper-case the result, English locale), separated by commas; the first rule whose pattern matches the
whole DN wins, and its replacement is applied as Java's `String.replaceAll` does. No rule matching fails
the authentication (Kafka: NoMatchingRule). Splitting, parsing and error messages follow Kafka's
`SslPrincipalMapper`; replacement back references beyond the pattern's groups are literal text, as there.

Patterns are Java regular expressions. We run them with Python's `re` only where both mean the same:
- `re.ASCII`, so `\\d`, `\\w`, `\\s` and case-insensitive matching are ASCII-only as Java's defaults;
- `.` (outside a class) becomes Java's "any but a line terminator" and `$` Java's "end, or before a final
  line terminator" (Java's terminators are \\n, \\r, \\r\\n, U+0085, U+2028, U+2029; Python's only \\n);
- `\\z` becomes Python's `\\Z`, and Java's `\\Z` the same as `$`.
Everything whose meaning differs and is not translated is refused at start with a message naming it
(a deliberate departure from Kafka, which would accept it): inline flags `(?i)`..., `\\b`/`\\B` (Unicode-
aware in Java 17), `\\p{..}`, `\\Q..\\E`, `\\h`, `\\v`, `\\R`, `\\X`, `\\G`, `\\e`, `\\c`, `\\N`, `\\x{..}`,
`\\u` of a UTF-16 surrogate, octal `\\0`, multi-digit back references, nested classes and `&&` inside a
class, `]` first in a class, `{` that is not a quantifier, and Python-only syntax (`(?P`, `(?#`, `(?(`). Patterns Python cannot
compile (e.g. variable-length look-behind) are refused with Python's reason.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

DEFAULT_RULES = "DEFAULT"

# Kafka's SslPrincipalMapper.RULE_PATTERN / RULE_SPLITTER (both regex dialects read these the same way).
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)

_LINE_TERMINATORS = "\\n\\r\\x85\\u2028\\u2029"
_DOT = f"[^{_LINE_TERMINATORS}]"
_END = f"(?=(?:\\r\\n|[{_LINE_TERMINATORS}])?\\Z)(?!(?<=\\r)\\n)"  # not between a final CR and LF
_REFUSED_ESCAPES = {
    "b": "\\b (word boundary: Unicode-aware in Java 17, not in Python)", "B": "\\B (word boundary)",
    "p": "\\p{...} (Unicode classes)", "P": "\\P{...} (Unicode classes)", "Q": "\\Q...\\E (quoting)",
    "E": "\\E", "h": "\\h", "H": "\\H", "v": "\\v (vertical whitespace in Java, VT in Python)", "V": "\\V",
    "R": "\\R", "X": "\\X", "G": "\\G", "e": "\\e", "c": "\\c", "N": "\\N", "k": "\\k<name>", "0": "\\0 (octal)",
    "x": None, "u": None,  # checked below: \xhh and \uhhhh are the same in both, \x{...} is not
}


class SslPrincipalMappingError(ValueError):
    """A bad `ssl.principal.mapping.rules` value (at start)."""


class NoMatchingRule(Exception):
    """No rule maps this DN: the client is not authenticated (Kafka: NoMatchingRule)."""


@dataclass(frozen=True, slots=True)
class _Literal:
    text: str


@dataclass(frozen=True, slots=True)
class _Group:
    number: int


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One rule; `pattern` None for DEFAULT. `source` and `replacement` as written (for messages)."""

    source: str | None = None
    replacement: str | None = None
    to_lower: bool = False
    to_upper: bool = False
    pattern: re.Pattern[str] | None = None
    template: tuple[_Literal | _Group, ...] = ()

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        template = self.template
        result = self.pattern.sub(
            lambda m: "".join(p.text if isinstance(p, _Literal) else (m.group(p.number) or "") for p in template), dn)
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result

    def __str__(self) -> str:  # Kafka's Rule.toString
        if self.pattern is None:
            return "DEFAULT"
        out = "RULE:" + (self.source or "")
        if self.replacement is not None:
            out += "/" + self.replacement
        return out + ("/L" if self.to_lower else "/U" if self.to_upper else "")


@dataclass(frozen=True, slots=True)
class SslPrincipalMapper:
    rules: tuple[MappingRule, ...]

    def name(self, dn: str) -> str:
        """The principal name for a certificate subject DN (RFC 2253, `gateway.x500_name`)."""
        for rule in self.rules:
            mapped = rule.apply(dn)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {dn}, rules [{', '.join(str(r) for r in self.rules)}]")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(str(r) for r in self.rules)}])"


def split_rules(rules: str) -> list[str]:
    return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip())]


def parse_rules(rules: str | None) -> SslPrincipalMapper:
    """Kafka's SslPrincipalMapper.fromRules, with its messages; raises SslPrincipalMappingError."""
    parsed = []
    for rule in split_rules(DEFAULT_RULES if rules is None else rules):
        m = _RULE_PARSER.match(rule)
        if m is None:
            raise SslPrincipalMappingError(f"Invalid rule: {rule}")
        if m.end() != len(rule):
            raise SslPrincipalMappingError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end():]}`")
        if m.group(1) is not None:
            parsed.append(MappingRule())
        elif m.group(2) is not None:
            parsed.append(_rule(m.group(2), m.group(4), m.group(6) == "L", m.group(6) == "U"))
        # else an empty rule: ignored
    return SslPrincipalMapper(tuple(parsed))


def _rule(source: str, replacement: str, to_lower: bool, to_upper: bool) -> MappingRule:
    translated = translate_java_regex(source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Python's FutureWarning on set syntax it may change: refuse
            pattern = re.compile(translated, re.ASCII)
    except (re.error, FutureWarning) as exc:
        raise SslPrincipalMappingError(f"Invalid rule pattern `{source}`: {exc}") from None
    return MappingRule(source, replacement, to_lower, to_upper, pattern,
                       _template(replacement, pattern.groups, source))


def _refuse(source: str, what: str) -> SslPrincipalMappingError:
    return SslPrincipalMappingError(
        f"Invalid rule pattern `{source}`: {what} is not supported by kgov's gateway (Java and Python regular "
        "expressions differ there); rewrite the pattern without it")


def translate_java_regex(source: str) -> str:
    """`source` (Java syntax) as a Python pattern meaning the same under re.ASCII, or
    SslPrincipalMappingError for what we do not translate."""
    out: list[str] = []
    i, n = 0, len(source)
    in_class = False
    class_start = -1
    previous_atom = False  # whether a quantifier may follow
    while i < n:
        c = source[i]
        if c == "\\":
            if i + 1 >= n:
                raise SslPrincipalMappingError(f"Invalid rule pattern `{source}`: trailing backslash")
            e = source[i + 1]
            if e in _REFUSED_ESCAPES and _REFUSED_ESCAPES[e] is not None:
                raise _refuse(source, str(_REFUSED_ESCAPES[e]))
            if e == "x" and source[i + 2:i + 3] == "{":
                raise _refuse(source, "\\x{...}")
            if e == "u" and re.fullmatch(r"[dD][89a-fA-F][0-9a-fA-F]{2}", source[i + 2:i + 6]):
                raise _refuse(source, "\\u escapes of UTF-16 surrogates (Java pairs them, Python does not)")
            if e.isdigit() and (in_class or source[i + 2:i + 3].isdigit()):
                raise _refuse(source, f"\\{e} followed by a digit or inside a class")
            if not in_class and e == "z":
                out.append("\\Z")
            elif not in_class and e == "Z":
                out.append(_END)
            elif e == "z" or e == "Z" or (e.isalpha() and e not in "dDsSwWtnrfaxuA"):
                raise _refuse(source, f"\\{e}")
            else:
                out.append(source[i:i + 2])
            i += 2
            previous_atom = True
            continue
        if in_class:
            if c == "[":
                raise _refuse(source, "a class inside a class")
            if c == "&" and source[i + 1:i + 2] == "&":
                raise _refuse(source, "&& (class intersection)")
            if c == "]" and i > class_start:
                in_class = False
                previous_atom = True
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            j = i + 1
            if source[j:j + 1] == "^":
                j += 1
            if source[j:j + 1] == "]":
                raise _refuse(source, "] first in a class")
            class_start = j
            out.append(source[i:j])
            i = j
            continue
        if c == "(" and source[i + 1:i + 2] == "?":
            kind = source[i + 2:i + 4]
            if kind[:1] in (":", "=", "!", ">") or kind in ("<=", "<!"):
                pass
            elif kind[:1] == "<":
                raise _refuse(source, "(?<name>...) (named groups)")
            else:
                raise _refuse(source, f"(?{kind[:1]} (inline flags and Python-only groups)")
            previous_atom = False
            out.append(c)
            i += 1
            continue
        if c == "{":
            m = re.compile(r"\{\d+(,\d*)?\}").match(source, i)
            if m is None or not previous_atom:
                raise _refuse(source, "{ that is not a quantifier {n}, {n,} or {n,m}")
            out.append(m.group(0))
            i = m.end()
            previous_atom = False
            continue
        if c == ".":
            out.append(_DOT)
        elif c == "$":
            out.append(_END)
        else:
            out.append(c)
        previous_atom = c not in "(|^"
        i += 1
    return "".join(out)


_BACK_REFERENCE = re.compile(r"\$(\d+)", re.ASCII)


def kafka_escaped_replacement(replacement: str, groups: int) -> str:
    """Kafka's Rule.escapeLiteralBackReferences: with groups, a `$n` naming no group (after dropping
    trailing digits while over 9) gets a backslash, so Java reads it as text. Kafka scans the original
    string but inserts into the growing copy, so from the second insertion on the backslash lands one
    place earlier per insertion; we do the same, so that the same rules yield the same names."""
    if groups == 0:
        return replacement
    value = replacement
    for m in _BACK_REFERENCE.finditer(replacement):
        digits = m.group(1)
        if digits.startswith("0"):
            continue
        number = int(digits)
        while number > groups and number >= 10:
            number //= 10
        if number > groups:
            at = m.start(1) - 1
            value = value[:at] + "\\" + value[at:]
    return value


def _template(replacement: str, groups: int, source: str) -> tuple[_Literal | _Group, ...]:
    """Java's Matcher.appendReplacement reading of Kafka's escaped `replacement`: `\\x` is x, `$n` group n
    (the first digit always, later digits while they still name a group). What Java throws on at every
    match (a trailing backslash, `$` without a digit, a group the pattern lacks) is refused here, at start:
    Kafka would fail each such client's authentication instead."""
    escaped = kafka_escaped_replacement(replacement, groups)
    parts: list[_Literal | _Group] = []
    text: list[str] = []
    i, n = 0, len(escaped)

    def refuse(why: str) -> SslPrincipalMappingError:
        return SslPrincipalMappingError(f"Invalid rule `{source}`: replacement `{replacement}` {why}")

    while i < n:
        c = escaped[i]
        if c == "\\":
            if i + 1 >= n:
                raise refuse("ends with an escape character (write \\\\ for a backslash)")
            text.append(escaped[i + 1])
            i += 2
        elif c == "$":
            if i + 1 >= n or escaped[i + 1] not in "0123456789":
                raise refuse("has `$` without a group number (write \\$ for a dollar sign)")
            number = int(escaped[i + 1])
            i += 2
            while i < n and escaped[i] in "0123456789" and number * 10 + int(escaped[i]) <= groups:
                number = number * 10 + int(escaped[i])
                i += 1
            if number > groups:
                raise refuse(f"names group {number}, but the pattern has {groups}")
            if text:
                parts.append(_Literal("".join(text)))
                text = []
            parts.append(_Group(number))
        else:
            text.append(c)
            i += 1
    if text:
        parts.append(_Literal("".join(text)))
    return tuple(parts)
