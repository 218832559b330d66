"""registry.client.RegistryClient sends its Basic credentials over plain http to loopback only, unless
`allow_plain_http`; without credentials any URL is fine."""

from __future__ import annotations

import pytest

from authz.cleartext_credentials import CleartextCredentials
from registry.client import RegistryClient

AUTH = ("svc", "a-secret-password")


def test_basic_auth_over_plain_http_to_another_host_is_refused() -> None:
    with pytest.raises(CleartextCredentials, match="allow_plain_http=True") as refused:
        RegistryClient("http://registry.example:8081", basic_auth=AUTH)
    assert "a-secret-password" not in str(refused.value)


@pytest.mark.parametrize(("url", "auth", "allow"), [
    ("http://registry.example:8081", AUTH, True),
    ("http://registry.example:8081", None, False),
    ("https://registry.example:8081", AUTH, False),
    ("http://127.0.0.1:8081/contexts/.ctx", AUTH, False),
])
def test_https_loopback_no_credentials_or_an_explicit_allowance_pass(
        url: str, auth: tuple[str, str] | None, allow: bool) -> None:
    with RegistryClient(url, basic_auth=auth, allow_plain_http=allow) as client:
        assert client.url == url
