"""Pure pieces of the registry: version ids, subjects, contexts, levels, modes, content negotiation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from authz.http import ApiError
from registry.api import flag, media_type_for
from registry.model import (
    Mode,
    RegistryError,
    context_of,
    contexts_of,
    parse_compatibility_level,
    parse_version,
    reference_context,
    reference_subject,
    validate_subject,
    written_forms,
)


@pytest.mark.parametrize(("text", "expected"), [("latest", -1), (" LaTeSt ", -1), ("-1", -1), ("1", 1),
                                                ("2147483647", 2**31 - 1)])
def test_version_ids(text: str, expected: int) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["0", "-2", "2147483648", "one", "", "1.5"])
def test_invalid_version_ids_are_42202(text: str) -> None:
    with pytest.raises(RegistryError) as err:
        parse_version(text)
    assert (err.value.code, err.value.status) == (42202, 422)


def test_status_is_the_first_three_digits() -> None:
    assert RegistryError(40401, "x").status == 404
    assert RegistryError(409, "x").status == 409
    assert RegistryError(50001, "x").status == 500


@pytest.mark.parametrize("subject", ["__GLOBAL", "__EMPTY", "a\nb", "a\x7fb", "a\x85b"])
def test_invalid_subjects(subject: str) -> None:
    with pytest.raises(RegistryError) as err:
        validate_subject(subject)
    assert err.value.code == 42208


def test_valid_subjects() -> None:
    for subject in ("", "orders-value", ":.ctx:orders", "ünïcode ok"):
        assert validate_subject(subject) == subject


def test_contexts() -> None:
    assert context_of("orders-value") == "."
    assert context_of(":.staging:orders-value") == ".staging"
    assert context_of(":.:x") == "."
    assert context_of(":.broken") == "."
    assert contexts_of([":.staging:b", "a", ":.archive:c", ":.staging:d"]) == [".", ".archive", ".staging"]
    assert contexts_of([]) == ["."]  # the default context is always there


def _stored_context_before(subject: str) -> str:
    """`context_of` as it was written before it was built on `_split_qualified`: the stored reading."""
    if subject.startswith(":."):
        end = subject.find(":", 1)
        if end > 1:
            return subject[1:end]
    return "."


@settings(max_examples=500)
@given(st.one_of(st.text(alphabet=":.*ab", max_size=8), st.text(max_size=12)))
def test_context_of_keeps_every_stored_subject_in_its_context(subject: str) -> None:
    assert context_of(subject) == _stored_context_before(subject)
    if not subject.startswith(":*:") and not (subject.startswith(":.") and ":" not in subject[2:]):
        assert context_of(subject) == reference_context(subject)  # the one parse, where Confluent's fits


def test_where_stored_subjects_and_references_read_a_subject_differently() -> None:
    # Confluent's QualifiedSubject: `:.ctx` is the context `.ctx` with an empty name, `:*:x` the wildcard.
    # As stored subject names they stay in the default context (their level, mode and listing).
    assert (reference_context(":.ctx"), context_of(":.ctx")) == (".ctx", ".")
    assert (reference_context(":*:x"), context_of(":*:x")) == ("*", ".")
    assert reference_subject("orders", ":.ctx") == ":.ctx:"  # never the stored subject `:.ctx`
    assert context_of(":.ctx:") == reference_context(":.ctx:") == ".ctx"


def test_levels_and_modes_are_case_insensitive() -> None:
    assert parse_compatibility_level("full_transitive") == "FULL_TRANSITIVE"
    assert Mode.parse("readonly") is Mode.READONLY
    with pytest.raises(RegistryError) as err:
        parse_compatibility_level("SOMETIMES")
    assert err.value.code == 42203
    with pytest.raises(RegistryError) as err:
        Mode.parse(3)
    assert err.value.code == 42204


def test_booleans_as_jax_rs_reads_them() -> None:
    assert flag("True") and flag("TRUE") and flag("true")
    assert not flag("False") and not flag("yes") and not flag(None)
    assert flag(None, default=True)


@pytest.mark.parametrize(("accept", "expected"), [
    (None, "application/vnd.schemaregistry.v1+json"),
    ("*/*", "application/vnd.schemaregistry.v1+json"),
    ("application/json", "application/json"),
    ("application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json",
     "application/vnd.schemaregistry.v1+json"),
    ("application/json; q=1, application/vnd.schemaregistry+json; q=0.5", "application/json"),
    ("text/html, application/*", "application/vnd.schemaregistry.v1+json"),
])
def test_content_negotiation(accept: str | None, expected: str) -> None:
    assert media_type_for(accept) == expected


def test_nothing_acceptable_is_406() -> None:
    with pytest.raises(ApiError) as err:
        media_type_for("text/html, application/xml")
    assert err.value.status == 406


# Confluent's QualifiedSubject.qualifySubjectWithParent(tenant, referrer, subject).toQualifiedSubject(),
# worked through from its source (client/.../utils/QualifiedSubject.java).
@pytest.mark.parametrize(("referrer", "subject", "expected"), [
    ("orders", "x", "x"),                              # default context: as written
    ("orders", ":.other:x", ":.other:x"),
    ("orders", ":.:x", "x"),                           # the default context, spelled out
    (":.ctx:orders", "x", ":.ctx:x"),                  # unqualified: the referrer's context
    (":.ctx:orders", ":.other:x", ":.other:x"),        # qualified: stays
    (":.ctx:orders", ":.ctx:x", ":.ctx:x"),
    (":.ctx:orders", ":.:x", ":.ctx::.:x"),            # `:.:x` counts as unqualified and is kept whole
    (":.ctx:orders", "a:b", ":.ctx:a:b"),
    (":.ctx:orders", ":ctx:x", ":.ctx::ctx:x"),        # no dot: not a context
    (":.ctx", "x", ":.ctx:x"),                         # a referrer without the closing colon
    (":.ctx:orders", ":.other", ":.other:"),
    (":.a:b:c", "x", ":.a:x"),                         # the context ends at the first colon
    ("orders", ":.::.ctx:x", ":.ctx:x"),
    ("orders", ":.", ""),                              # `:.` reads as the default context, empty name
])
def test_reference_subjects_take_the_referrers_context_unless_qualified(referrer: str, subject: str,
                                                                         expected: str) -> None:
    assert reference_subject(referrer, subject) == expected
    assert subject in written_forms(expected)  # referencedby and the delete checks find it


def test_what_resolution_depends_on() -> None:
    assert reference_context("orders") == reference_context(":.:orders") == "."
    assert reference_context(":.ctx:orders") == reference_context(":.ctx:other") == ".ctx"
    assert written_forms("x") == ("x", ":.:x")
    assert written_forms(":.ctx:x") == (":.ctx:x", ":.::.ctx:x", "x")


# Subjects built from the characters that matter to contexts (and a letter), so that collisions are common.
_NAMES = st.text(alphabet=":.*ab", max_size=8)


@settings(max_examples=500, deadline=None)
@given(referrer=_NAMES, subject=_NAMES)
def test_every_written_reference_is_among_the_written_forms_of_what_it_resolves_to(referrer: str,
                                                                                    subject: str) -> None:
    """What `referencedby` and the 42206 checks rely on to find every reference to a subject."""
    target = reference_subject(referrer, subject)
    assert subject in written_forms(target)
