"""JSON text as Jackson (which both Avro Java and Confluent use) writes it.

Compact, non-ASCII characters kept as they are, and strings escaped Jackson's way: `\\"`, `\\\\`,
the five short escapes `\\b \\t \\f \\n \\r`, and `\\u00XX` (upper-case hex) for the other control
characters. Python's `json.dumps` differs only in the hex case, but canonical texts are compared
byte for byte, so the difference matters.
"""

from __future__ import annotations

import re

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    return _ESCAPES.get(char) or f"\\u{ord(char):04X}"


def string(value: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(_escape, value) + '"'
