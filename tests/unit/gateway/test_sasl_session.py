"""The connection's SASL state machine (handshake, authenticate, KIP-368 sessions) with a tiny mechanism."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from authz.model import Principal
from gateway.sasl_session import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    SaslSession,
)
from sasl.mechanism import Challenge, Failure, Step, Success


@dataclass
class EchoPlain:
    """PLAIN-like: b"user:pass"; the password must be "pw". One round, or two when the user is "two"."""

    name: str = "TEST"
    lifetime_ms: int | None = None
    rounds: int = 0

    def step(self, received: bytes) -> Step:
        self.rounds += 1
        user, _, password = received.decode().partition(":")
        if user == "boom":
            raise RuntimeError("mechanism bug")
        if user == "two" and self.rounds == 1:
            return Challenge(b"more")
        if password != "pw":
            return Failure("bad password", data=b"e=invalid")
        return Success(Principal("User", user), session_lifetime_ms=self.lifetime_ms)


def session(lifetime: int | None = None, max_reauth: int = 0) -> SaslSession:
    return SaslSession(enabled=["TEST"], factory=lambda name, addr: EchoPlain(lifetime_ms=lifetime),
                       client_address="10.0.0.1", max_reauth_ms=max_reauth)


def test_successful_login_then_requests_may_be_served() -> None:
    s = session()
    assert not s.may_serve(0)
    assert s.handshake("TEST", 1, 0) == 0
    assert not s.may_serve(0)
    step = s.authenticate(b"alice:pw", 0)
    assert step.done and step.error_code == 0 and step.session_lifetime_ms == 0
    assert s.principal == Principal("User", "alice") and s.may_serve(10**12)


def test_multi_round_exchange() -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    first = s.authenticate(b"two:pw", 0)
    assert first.data == b"more" and not first.done and not first.failed
    assert s.authenticate(b"two:pw", 0).done


def test_unsupported_mechanism_is_33_and_the_session_is_over() -> None:
    s = session()
    assert s.handshake("PLAIN", 1, 0) == UNSUPPORTED_SASL_MECHANISM
    assert s.handshake("TEST", 1, 0) == ILLEGAL_SASL_STATE


def test_wrong_password_is_58_with_kafkas_message_and_no_reason_leak() -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    step = s.authenticate(b"alice:nope", 0)
    assert step.failed and step.error_code == SASL_AUTHENTICATION_FAILED
    assert step.error_message == ("Authentication failed during authentication due to invalid credentials with "
                                  "SASL mechanism TEST")
    assert "password" not in (step.error_message or "") and step.reason == "bad password"
    assert not s.may_serve(0)


def test_authenticate_before_handshake_is_illegal() -> None:
    step = session().authenticate(b"alice:pw", 0)
    assert step.failed and step.error_code == ILLEGAL_SASL_STATE


def test_a_crashing_mechanism_fails_closed() -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    step = s.authenticate(b"boom:pw", 0)
    assert step.failed and step.error_code == SASL_AUTHENTICATION_FAILED and "RuntimeError" in (step.reason or "")


@pytest.mark.parametrize(("credential", "max_reauth", "expected"), [
    (None, 0, 0), (5000, 0, 5000), (None, 3000, 3000), (5000, 3000, 3000), (2000, 3000, 2000)])
def test_session_lifetime_is_the_smaller_limit(credential: int | None, max_reauth: int, expected: int) -> None:
    s = session(credential, max_reauth)
    s.handshake("TEST", 1, 0)
    assert s.authenticate(b"alice:pw", 1000).session_lifetime_ms == expected
    if expected:
        assert s.may_serve(1000 + expected - 1) and not s.may_serve(1000 + expected)


def test_reauthentication_renews_the_session_same_principal_only() -> None:
    s = session(max_reauth=3000)
    s.handshake("TEST", 1, 0)
    s.authenticate(b"alice:pw", 0)
    assert s.handshake("TEST", 1, 2500) == 0
    assert s.may_serve(2600)  # still serving in-flight traffic while re-authenticating
    renewed = s.authenticate(b"alice:pw", 2700)
    assert renewed.done and renewed.reauthentication and s.may_serve(5600)
    assert s.handshake("TEST", 1, 3000) == ILLEGAL_SASL_STATE  # at most one start per second
    assert s.handshake("TEST", 1, 4000) == 0
    other = s.authenticate(b"bob:pw", 4100)
    assert other.failed and "Cannot change principals" in (other.error_message or "")


def test_reauthentication_needs_an_expiring_session() -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    s.authenticate(b"alice:pw", 0)
    assert s.handshake("TEST", 1, 5000) == ILLEGAL_SASL_STATE


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=100))
def test_garbage_sasl_bytes_never_authenticate(data: bytes) -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    try:
        step = s.authenticate(data, 0)
    except UnicodeDecodeError:  # pragma: no cover - the session catches mechanism errors
        pytest.fail("mechanism exception escaped")
    assert step.done == (s.principal is not None)
    if step.done:
        assert data.decode().partition(":")[2] == "pw"
