"""authz.cleartext_credentials: credentials go over plain http to loopback only, unless the user allows it."""

from __future__ import annotations

import pytest

from authz.cleartext_credentials import CleartextCredentials, refuse_cleartext_credentials


@pytest.mark.parametrize("url", [
    "https://kgov.example:8080", "HTTPS://10.0.0.7", "http://127.0.0.1:8080", "http://127.8.9.10",
    "http://localhost:8080/", "http://LOCALHOST", "http://[::1]:8080", "http://[::ffff:127.0.0.1]:1",
])
def test_https_and_loopback_are_allowed(url: str) -> None:
    refuse_cleartext_credentials(url, allowed=False)


@pytest.mark.parametrize("url", [
    "http://kgov.example:8080", "http://10.0.0.7:8080", "HTTP://192.0.2.1", "http://[2001:db8::1]:8080",
    "http://localhost.example.com", "http://127.0.0.1.nip.io", "http://0.0.0.0:8080",
])
def test_plain_http_beyond_loopback_is_refused_unless_allowed(url: str) -> None:
    with pytest.raises(CleartextCredentials, match=r"over plain http.*clear text.*--allow-plain-http"):
        refuse_cleartext_credentials(url, allowed=False)
    refuse_cleartext_credentials(url, allowed=True)


@pytest.mark.parametrize("url", ["kgov.example:8080", "ftp://kgov.example", "http://", "http://[::1", ""])
def test_what_is_not_an_http_url_is_refused_whatever_the_flag(url: str) -> None:
    with pytest.raises(CleartextCredentials, match="not an http:// or https:// URL"):
        refuse_cleartext_credentials(url, allowed=True)


@pytest.mark.parametrize("url", ["https://admin:secret@kgov.example", "http://admin@127.0.0.1:8080"])
def test_a_url_carrying_credentials_is_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(CleartextCredentials, match="must not carry credentials") as refused:
        refuse_cleartext_credentials(url, allowed=True)
    assert "secret" not in str(refused.value)
