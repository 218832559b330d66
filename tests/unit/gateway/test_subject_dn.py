"""Certificate subjects rendered as Kafka's default principal builder does (RFC 2253)."""

from __future__ import annotations

from gateway.proxy import subject_dn


def test_most_specific_rdn_first_with_short_names() -> None:
    subject = ((("countryName", "DE"),), (("organizationName", "kgov"),), (("organizationalUnitName", "eng"),),
               (("commonName", "alice"),))
    assert subject_dn(subject) == "CN=alice,OU=eng,O=kgov,C=DE"


def test_special_characters_are_escaped_and_multivalued_rdns_joined() -> None:
    subject = ((("organizationName", "Acme, Inc."),), (("commonName", "a+b"), ("userId", "#1 ")),)
    assert subject_dn(subject) == "CN=a\\+b+UID=\\#1\\ ,O=Acme\\, Inc."


def test_unknown_attribute_names_are_kept() -> None:
    assert subject_dn(((("emailAddress", "a@b.c"),),)) == "emailAddress=a@b.c"
