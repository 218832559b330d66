"""`[gateway] upstream_sasl_mechanism = "OAUTHBEARER"`: validation, and secrets kept out of reprs and errors."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.runtime import upstream_oauth_login

SECRET = "gw-secret-7f3a9c"
BASE: dict[str, Any] = {
    "upstream_security_protocol": "SASL_SSL",
    "upstream_sasl_mechanism": "OAUTHBEARER",
    "upstream_oauth_token_endpoint": "https://idp.example.com/oauth2/token",
    "upstream_oauth_client_id": "kgov-gateway",
    "upstream_oauth_client_secret": SECRET,
}


def config(**changes: Any) -> GatewayConfig:
    values = {**BASE, **changes}
    return GatewayConfig(**{k: v for k, v in values.items() if v is not None})


def refusal(**changes: Any) -> str:
    with pytest.raises(ValidationError) as info:
        config(**changes)
    text = str(info.value)
    assert SECRET not in text
    return text


def test_a_complete_oauthbearer_upstream_is_accepted_without_username_or_password() -> None:
    c = config(upstream_oauth_scope="kafka", upstream_oauth_extensions={"logicalCluster": "lkc-123"})
    assert c.upstream_sasl_mechanism == "OAUTHBEARER" and c.upstream_username is None
    login = upstream_oauth_login(c, now_ms=lambda: 0)
    assert login is not None and login.tokens.client_id == "kgov-gateway"
    assert login.extensions == {"logicalCluster": "lkc-123"}


@pytest.mark.parametrize(("missing", "named"), [
    ("upstream_oauth_token_endpoint", "gateway.upstream_oauth_token_endpoint"),
    ("upstream_oauth_client_id", "gateway.upstream_oauth_client_id"),
    ("upstream_oauth_client_secret", "KGOV_GATEWAY__UPSTREAM_OAUTH_CLIENT_SECRET"),
])
def test_each_missing_oauth_setting_is_named(missing: str, named: str) -> None:
    text = refusal(**{missing: None})
    assert named in text and "client-credentials" in text
    others = {"gateway.upstream_oauth_token_endpoint", "gateway.upstream_oauth_client_id",
              "KGOV_GATEWAY__UPSTREAM_OAUTH_CLIENT_SECRET"} - {named}
    assert not any(o in text for o in others)


def test_the_secret_is_not_in_the_error_when_everything_else_is_missing() -> None:
    text = refusal(upstream_oauth_token_endpoint=None, upstream_oauth_client_id=None)
    assert "gateway.upstream_oauth_token_endpoint, gateway.upstream_oauth_client_id" in text


@pytest.mark.parametrize(("url", "expected"), [
    ("ftp://idp.example.com/token", "got scheme 'ftp'"),
    ("file:///etc/passwd", "with a host name"),
    ("idp.example.com/token", "with a host name"),
    ("http://idp.example.com/token", "clear text: use https://"),
    ("http://10.0.0.5:8080/token", "clear text: use https://"),
])
def test_token_endpoint_must_be_https_or_loopback_http(url: str, expected: str) -> None:
    assert expected in refusal(upstream_oauth_token_endpoint=url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/oauth/token", "http://localhost/oauth/token",
                                 "http://[::1]:9/token", "https://idp.example.com/token"])
def test_loopback_http_and_https_endpoints_are_accepted(url: str) -> None:
    assert config(upstream_oauth_token_endpoint=url).upstream_oauth_token_endpoint == url


def test_credentials_in_the_endpoint_url_are_refused_without_echoing_them() -> None:
    text = refusal(upstream_oauth_token_endpoint="https://gw:url-password-55@idp.example.com/token")
    assert "must not carry credentials" in text and "url-password-55" not in text


@pytest.mark.parametrize(("extensions", "expected"), [
    ({"auth": "x"}, "invalid extension name 'auth'"),
    ({"logical-cluster": "x"}, "invalid extension name 'logical-cluster'"),
    ({"traceId": "a\x01b"}, "the value of 'traceId' must be printable ASCII"),
    ({"traceId": ""}, "the value of 'traceId' must be printable ASCII"),
])
def test_kip342_extension_rules(extensions: dict[str, str], expected: str) -> None:
    assert expected in refusal(upstream_oauth_extensions=extensions)


def test_oauth_settings_without_the_oauthbearer_mechanism_are_refused() -> None:
    text = refusal(upstream_sasl_mechanism="SCRAM-SHA-512", upstream_username="svc", upstream_password="pw-1234")
    assert 'upstream_sasl_mechanism = "OAUTHBEARER"' in text
    text = refusal(upstream_security_protocol="SSL")
    assert "does not log in upstream with OAUTHBEARER" in text


def test_password_mechanisms_still_need_username_and_password() -> None:
    with pytest.raises(ValidationError, match="upstream_username"):
        GatewayConfig(upstream_security_protocol="SASL_PLAINTEXT", upstream_sasl_mechanism="PLAIN",
                      upstream_password="hunter2-password")


def test_secrets_stay_out_of_reprs_and_dumps_of_the_config_and_the_login() -> None:
    c = config()
    login = upstream_oauth_login(c, now_ms=lambda: 0)
    assert login is not None
    for text in (repr(c), str(c), repr(login), repr(login.tokens), str(c.model_dump()), c.model_dump_json()):
        assert SECRET not in text


def test_settings_errors_do_not_echo_secrets_of_any_section() -> None:
    """pydantic puts the offending input in its message unless told not to: the secret would be in it."""
    from kgov.settings import Settings

    with pytest.raises(ValidationError) as info:
        Settings(gateway={**BASE, "upstream_oauth_token_endpoint": "http://idp.example.com/token"})
    assert "clear text" in str(info.value) and SECRET not in str(info.value)
    with pytest.raises(ValidationError) as info:
        Settings(gateway={"upstream_security_protocol": "SASL_PLAINTEXT", "upstream_password": SECRET})
    assert "upstream_username" in str(info.value) and SECRET not in str(info.value)


def test_the_secret_comes_from_the_environment_variable_the_errors_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from kgov.settings import Settings

    monkeypatch.setenv("KGOV_GATEWAY__UPSTREAM_OAUTH_CLIENT_SECRET", SECRET)
    monkeypatch.setenv("KGOV_GATEWAY__UPSTREAM_OAUTH_EXTENSIONS", '{"logicalCluster": "lkc-1"}')
    settings = Settings(gateway={k: v for k, v in BASE.items() if k != "upstream_oauth_client_secret"})
    secret = settings.gateway.upstream_oauth_client_secret
    assert secret is not None and secret.get_secret_value() == SECRET
    assert settings.gateway.upstream_oauth_extensions == {"logicalCluster": "lkc-1"}


def test_refresh_and_retry_settings_default_to_kafkas_client_defaults_and_reach_the_token_source() -> None:
    from gateway.upstream_token import RefreshPolicy

    default = upstream_oauth_login(config(), now_ms=lambda: 0)
    assert default is not None and default.tokens.policy == RefreshPolicy(
        window_factor=0.8, window_jitter=0.05, min_period_ms=60_000, buffer_ms=300_000,
        retry_backoff_ms=100, retry_backoff_max_ms=10_000)
    tuned = upstream_oauth_login(config(
        upstream_oauth_refresh_window_factor=0.6, upstream_oauth_refresh_window_jitter=0,
        upstream_oauth_refresh_min_period_s=10, upstream_oauth_refresh_buffer_s=0,
        upstream_oauth_retry_backoff_ms=250, upstream_oauth_retry_backoff_max_ms=2000), now_ms=lambda: 0)
    assert tuned is not None and tuned.tokens.policy == RefreshPolicy(0.6, 0.0, 10_000, 0, 250, 2000)


@pytest.mark.parametrize(("setting", "value"), [
    # Kafka's legal ranges for sasl.login.refresh.*
    ("upstream_oauth_refresh_window_factor", 0.49), ("upstream_oauth_refresh_window_factor", 1.01),
    ("upstream_oauth_refresh_window_jitter", -0.01), ("upstream_oauth_refresh_window_jitter", 0.26),
    ("upstream_oauth_refresh_min_period_s", -1), ("upstream_oauth_refresh_min_period_s", 901),
    ("upstream_oauth_refresh_buffer_s", -1), ("upstream_oauth_refresh_buffer_s", 3601),
    ("upstream_oauth_retry_backoff_ms", 0), ("upstream_oauth_retry_backoff_max_ms", 0),
])
def test_refresh_settings_outside_kafkas_ranges_are_refused(setting: str, value: float) -> None:
    assert setting in refusal(**{setting: value})


def test_retry_backoff_max_below_the_initial_backoff_is_refused() -> None:
    text = refusal(upstream_oauth_retry_backoff_ms=5000, upstream_oauth_retry_backoff_max_ms=1000)
    assert "gateway.upstream_oauth_retry_backoff_max_ms must be at least gateway.upstream_oauth_retry_backoff_ms" in text
