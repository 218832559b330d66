"""`patternProperties` regexes are matched in linear time (RE2) with Java's `find()` meaning; a pattern
that cannot be evaluated so is refused with its name and the reason, never taken as "no match"."""

from __future__ import annotations

import re
import time

import pytest
import re2
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from registry.schemas.json_model import (
    PATTERN_CACHE_BYTES,
    UnsupportedPatternError,
    compile_cost,
    compile_pattern,
)

# Generous for a loaded, shared CI machine; with backtracking these would take longer than the universe.
FAST_S = 2.0


@pytest.mark.parametrize(("name", "expected"), [("a" * 10_000, True), ("a" * 10_000 + "!", False),
                                                ("b" + "a" * 10_000, False)])
def test_catastrophic_backtracking_pattern_answers_in_linear_time(name: str, expected: bool) -> None:
    started = time.perf_counter()
    assert compile_pattern("^(a+)+$").matches(name) is expected
    assert time.perf_counter() - started < FAST_S


def test_other_exponential_patterns_answer_quickly() -> None:
    started = time.perf_counter()
    assert compile_pattern("^(a|aa)+$").matches("a" * 5_000 + "b") is False
    assert compile_pattern("^(a|a?)+$").matches("a" * 5_000 + "b") is False
    assert compile_pattern("(x+x+)+y").matches("x" * 5_000) is False
    assert compile_pattern("^([a-z0-9]+)*@").matches("a" * 5_000 + "!") is False
    assert time.perf_counter() - started < FAST_S


# (pattern, name, find()) in Java's reading; the ones marked "Java" were read otherwise by Python's `re`.
JAVA_CASES = [
    ("^S_", "S_1", True),
    ("^S_", "xS_1", False),
    ("I_", "xI_1", True),  # find(), not matches(): unanchored
    ("^[a-z]+_id$", "customer_id", True),
    ("^[a-z]+_id$", "customer_id2", False),
    ("^(?i)ab$", "AB", True),
    ("a|b", "xxb", True),
    ("^a.c$", "a\nc", False),
    ("(?s)^a.c$", "a\nc", True),
    ("(?m)^b$", "a\nb\nc", True),
    ("^a$", "a\n", True),  # `$` before a final line break, in Java and Python alike
    ("^a$", "a\nb", False),
    ("a$\\n?", "a\n", True),
    ("[$]", "$", True),
    ("\\$", "a$", True),
    ("^\\d+$", "123", True),
    ("^\\d+$", "\u0663", False),  # Java: ASCII digits only (Python's `re` said True)
    ("^\\s$", "\x0b", True),  # Java, Python and RE2's POSIX class (RE2's own \s has no vertical tab)
    ("^[a\\s]+$", "a\x0b", True),
    ("^[^\\S]$", "\x0b", True),
    ("^\\S$", "\x0b", False),
    ("^\\w+$", "\u00e9t\u00e9", False),  # Java: ASCII word characters only (Python's `re` said True)
    ("^\\p{L}+$", "\u00e9t\u00e9", True),  # Java (Python's `re` could not compile it: never matched)
    ("^\\u00e9$", "\u00e9", True),
    ("^\\x{e9}$", "\u00e9", True),  # Java
    ("^\\Qa.b\\E$", "a.b", True),  # Java
    ("^\\Qa.b\\E$", "axb", False),
    ("^a\\z", "a", True),  # Java
    ("^[^]a]$", "b", True),
    ("^[]a]$", "]", True),
    ("(?:x){2,3}", "xx", True),
    ("x{2,3}$", "xax", False),
]


@pytest.mark.parametrize(("regex", "name", "expected"), JAVA_CASES)
def test_patterns_have_javas_meaning(regex: str, name: str, expected: bool) -> None:
    assert compile_pattern(regex).matches(name) is expected


@pytest.mark.parametrize(("regex", "reason"), [
    ("^(a)\\1$", "RE2) rejects it: invalid escape sequence: \\1"),
    ("^(?=x)", "RE2) rejects it: invalid perl operator: (?="),
    ("(?<!x)y", "RE2) rejects it"),
    ("a*+", "RE2) rejects it"),
    ("[", "RE2) rejects it: missing ]"),
    ("a\\Z", "RE2) rejects it"),
    ("x{1001}", "RE2) rejects it: invalid repetition size"),
    ("x" * 100_000, "RE2) rejects it: pattern too large"),
    ("(" * 10_000, "RE2) rejects it: missing ): "),  # RE2's reason quotes the rest of the pattern
    ("^[[:alpha:]]+$", "'[' inside a character class"),
    ("^[a-z&&[^e]]$", "'&&' inside a character class"),
    ("^[a-z&&def]$", "'&&' inside a character class"),
    ("^a{,3}$", "'{,n}'"),
    ("\ud800", "not valid Unicode"),
])
def test_patterns_that_cannot_be_evaluated_are_refused_by_name(regex: str, reason: str) -> None:
    with pytest.raises(UnsupportedPatternError) as refused:
        compile_pattern(regex)
    message = str(refused.value)
    assert message.startswith('patternProperties pattern "')
    assert " cannot be evaluated: " in message
    assert reason in message
    assert len(message) < 400  # a huge pattern is quoted in part


def test_a_name_that_is_not_unicode_is_refused_not_skipped() -> None:
    with pytest.raises(UnsupportedPatternError, match="lone surrogate"):
        compile_pattern("^a").matches("a\ud800")


@pytest.mark.parametrize(("regex", "name", "expected"), [
    ("a", "a\nb\n", True),  # no `$`
    ("b$", "a\nb\n", True),  # `$` before the final line break
    ("a$", "a\nb\n", False),
    ("^a$|b$", "a\nb\n", True),  # each `$` ends an alternative of the whole pattern
    ("^a$|^b$", "a\nb\n", False),
    ("(?s)^a.b$", "a\nb\n", True),
    ("^[ab\n]+$", "a\nb\n", True),
    ("b$", "a\nb\n\n", False),  # two final line breaks: `$` only before the last
    ("\n$", "a\nb\n\n", True),
    ("(?m)^a$", "a\nb\n", True),
    ("b\\b$", "a\nb\n", True),
])
def test_dollar_against_a_name_with_several_line_breaks(regex: str, name: str, expected: bool) -> None:
    assert compile_pattern(regex).matches(name) is expected
    assert (re.search(regex, name) is not None) is expected  # Java and Python read these alike


@pytest.mark.parametrize(("regex", "without_final_break"), [
    ("(?:b$)", True), ("b$\n?", True), ("a\\z|b$", True), ("(a$|c)", False)])
def test_dollar_elsewhere_against_a_name_with_several_line_breaks_is_refused(regex: str,
                                                                             without_final_break: bool) -> None:
    assert compile_pattern(regex).matches("a\nb") is without_final_break  # evaluated
    with pytest.raises(UnsupportedPatternError, match="several line breaks"):
        compile_pattern(regex).matches("a\nb\n")


def test_cost_grows_with_the_name_and_the_pattern() -> None:
    small, large = compile_pattern("^S_"), compile_pattern("a[ab]{500}c")
    assert small.cost("S_1") == 1
    assert large.cost("a" * 100_000) > 100 * small.cost("a" * 100_000)
    assert large.cost("a" * 100_000) > 10 * large.cost("a" * 1_000)
    # The budget charge covers RE2's worst case (its NFA, for a pattern whose DFA is too large).
    name = "ab" * 50_000
    # CPU time of this thread (what the work costs), not wall time: other processes on a loaded machine
    # stretch the latter several times over.
    started = time.thread_time()
    assert large.matches(name) is False
    elapsed = time.thread_time() - started
    assert elapsed < large.cost(name) * 9e-6 * 10  # 9 us a unit, with room


def test_compile_cost_covers_checking_and_compiling() -> None:
    regex = "ab(c|d)" * 5_000
    started = time.thread_time()  # CPU time, as above
    compile_pattern(regex)
    elapsed = time.thread_time() - started
    assert compile_cost("^S_") == 1
    assert elapsed < compile_cost(regex) * 9e-6 * 10  # 9 us a unit, with room
    # A name ending in a line break may need the pattern's second form (`$` before it) compiled too,
    # or (each `$` ending an alternative) two searches.
    assert compile_pattern("(a$)").cost("a\n") == 1 + compile_cost("(a$)")
    assert compile_pattern("a").cost("a\n") == 1
    twice = compile_pattern("a[ab]{500}c$")
    assert twice.cost("ab" * 50_000 + "\n") > 1.9 * twice.cost("ab" * 50_000)


def test_compiled_patterns_are_kept_within_the_memory_budget() -> None:
    # Each RE2 object may grow to its `max_mem` (1 MiB): its programs, then the DFA states searches add.
    kept = PATTERN_CACHE_BYTES // (1 << 20)
    assert 16 <= kept <= 64
    in_re2_cache = re2._Regexp._make.cache_info().currsize
    compile_pattern.cache_clear()
    with pytest.raises(UnsupportedPatternError):
        compile_pattern("(?=x)")
    assert compile_pattern.cache_info().currsize == 0  # a refusal takes no room
    first = compile_pattern("^k0_[a-z]+$")
    assert compile_pattern("^k0_[a-z]+$") is first  # cached
    for i in range(1, kept + 40):
        assert compile_pattern(f"^k{i}_[a-z]+$").matches(f"k{i}_ab")
    assert compile_pattern.cache_info().currsize == kept
    assert compile_pattern("^k0_[a-z]+$") is not first  # the least recently used went first
    assert re2._Regexp._make.cache_info().currsize == in_re2_cache  # re2's own cache keeps none of them
    assert first.compiled.ProgramSize() > 0  # RE2 objects themselves, not re2's Python wrappers


# Simple generated patterns that Python's `re`, RE2 and Java read alike, over ASCII names: the
# answers are the ones the registry gave with `re`.
ATOMS = st.sampled_from(["a", "b", "-", "_", "\\.", ".", "[ab]", "[^a]", "[a-c_]", "\\d", "\\w", "\\W", "\\s",
                         "\\S", "[a\\s]", "[^\\s]", "[\\S-]", "\\b", "(?:a|b)", "(a)", "(b|)", "x"])
QUANTIFIERS = st.sampled_from(["", "", "*", "+", "?", "{2}", "{1,3}", "*?", "+?"])


@st.composite
def patterns(draw: st.DrawFn) -> str:
    pieces = [draw(ATOMS) + draw(QUANTIFIERS) for _ in range(draw(st.integers(1, 5)))]
    body = "".join(pieces)
    if draw(st.booleans()):
        body = body + "|" + draw(ATOMS) + draw(QUANTIFIERS)
    return draw(st.sampled_from(["", "^"])) + body + draw(st.sampled_from(["", "$"]))


NAMES = st.text(alphabet="ab_-.1 x\n\t\x0b", max_size=12)


@settings(max_examples=400, deadline=None)
@given(patterns(), NAMES)
def test_simple_patterns_answer_as_pythons_re_did(regex: str, name: str) -> None:
    try:
        expected = re.search(regex, name) is not None
    except re.error:  # e.g. a quantified `\b`: not a pattern both engines accept
        assume(False)
    assert compile_pattern(regex).matches(name) is expected


@settings(max_examples=400, deadline=None)
@given(patterns(), st.text(alphabet="ab_x\n", max_size=8))
def test_dollar_before_a_final_line_break_answers_as_pythons_re_did(regex: str, name: str) -> None:
    name += "\n"  # with other line breaks before it or not
    try:
        expected = re.search(regex, name) is not None
    except re.error:
        assume(False)
    assert compile_pattern(regex).matches(name) is expected
