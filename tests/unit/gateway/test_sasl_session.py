"""The connection's SASL state machine (handshake, authenticate, KIP-368 sessions) with a tiny mechanism."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from authz.model import Principal
from gateway.sasl_session import (
    API_VERSIONS,
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATE,
    SASL_AUTHENTICATION_FAILED,
    SASL_HANDSHAKE,
    UNSUPPORTED_SASL_MECHANISM,
    Admission,
    AuthStep,
    MechanismStep,
    SaslSession,
    State,
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


def session(lifetime: int | None = None, max_reauth: int = 0, made: list[Principal | None] | None = None,
            enabled: tuple[str, ...] = ("TEST",)) -> SaslSession:
    def factory(name: str, addr: str, *, reauthenticating: Principal | None = None) -> EchoPlain:
        if made is not None:
            made.append(reauthenticating)
        return EchoPlain(name=name, lifetime_ms=lifetime)

    return SaslSession(enabled=enabled, factory=factory, client_address="10.0.0.1", max_reauth_ms=max_reauth)


METADATA, PRODUCE = 3, 0


def logged_in(s: SaslSession, at: int = 0, user: str = "alice", mechanism: str = "TEST") -> SaslSession:
    assert s.handshake(mechanism, 1, at).error_code == 0
    assert s.authenticate(f"{user}:pw".encode(), at).done
    return s


def test_successful_login_then_requests_may_be_served() -> None:
    s = session()
    assert s.admit(METADATA, 0) is Admission.UNAUTHENTICATED
    assert s.admit(API_VERSIONS, 0) is Admission.SERVE and s.admit(SASL_HANDSHAKE, 0) is Admission.SASL
    assert s.admit(SASL_AUTHENTICATE, 0) is Admission.UNAUTHENTICATED  # Kafka: before a handshake, a close
    assert s.handshake("TEST", 1, 0).error_code == 0
    assert s.admit(METADATA, 0) is Admission.DURING_AUTHENTICATION
    step = s.authenticate(b"alice:pw", 0)
    assert step.done and step.error_code == 0 and step.session_lifetime_ms == 0
    assert s.principal == Principal("User", "alice") and s.admit(METADATA, 10**12) is Admission.SERVE


def test_multi_round_exchange() -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    first = s.authenticate(b"two:pw", 0)
    assert first.data == b"more" and not first.done and not first.failed
    assert s.authenticate(b"two:pw", 0).done


def test_unsupported_mechanism_is_33_and_the_session_is_over() -> None:
    s = session()
    step = s.handshake("PLAIN", 1, 0)
    assert step.error_code == UNSUPPORTED_SASL_MECHANISM and step.failed and not step.reauthentication
    assert s.handshake("TEST", 1, 0).error_code == ILLEGAL_SASL_STATE
    assert s.admit(METADATA, 0) is Admission.UNAUTHENTICATED


def test_wrong_password_is_58_with_kafkas_message_and_no_reason_leak() -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    step = s.authenticate(b"alice:nope", 0)
    assert step.failed and step.error_code == SASL_AUTHENTICATION_FAILED and step.mechanism_failure
    assert step.error_message == ("Authentication failed during authentication due to invalid credentials with "
                                  "SASL mechanism TEST")
    assert "password" not in (step.error_message or "") and step.reason == "bad password"
    assert s.admit(METADATA, 0) is Admission.UNAUTHENTICATED


def test_authenticate_before_handshake_is_illegal() -> None:
    step = session().authenticate(b"alice:pw", 0)
    assert step.failed and step.error_code == ILLEGAL_SASL_STATE


def test_a_crashing_mechanism_fails_closed_and_is_not_a_mechanism_refusal() -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    step = s.authenticate(b"boom:pw", 0)
    assert step.failed and step.error_code == SASL_AUTHENTICATION_FAILED and "RuntimeError" in (step.reason or "")
    assert not step.mechanism_failure  # the mechanism did not audit it: the gateway must


@pytest.mark.parametrize(("credential", "max_reauth", "expected"), [
    (None, 0, 0), (5000, 0, 5000), (None, 3000, 3000), (5000, 3000, 3000), (2000, 3000, 2000)])
def test_session_lifetime_is_the_smaller_limit(credential: int | None, max_reauth: int, expected: int) -> None:
    s = session(credential, max_reauth)
    s.handshake("TEST", 1, 0)
    assert s.authenticate(b"alice:pw", 1000).session_lifetime_ms == expected
    if expected:
        assert s.admit(METADATA, 1000 + expected - 1) is Admission.SERVE
        assert s.admit(METADATA, 1000 + expected) is Admission.SESSION_EXPIRED


def test_an_expired_credential_is_a_session_that_has_already_expired() -> None:
    s = logged_in(session(lifetime=0))
    assert s.admit(METADATA, 0) is Admission.SESSION_EXPIRED


def test_reauthentication_renews_the_session_same_principal_only() -> None:
    made: list[Principal | None] = []
    s = logged_in(session(max_reauth=3000, made=made))
    assert s.handshake("TEST", 1, 2500).error_code == 0
    assert made == [None, Principal("User", "alice")]  # the mechanism knows it renews alice's session
    renewed = s.authenticate(b"alice:pw", 2700)
    assert renewed.done and renewed.reauthentication and s.admit(METADATA, 5600) is Admission.SERVE
    assert s.handshake("TEST", 1, 4000).error_code == 0
    other = s.authenticate(b"bob:pw", 4100)
    assert other.failed and other.error_code == SASL_AUTHENTICATION_FAILED and other.reauthentication
    assert other.error_message == "Cannot change principals during re-authentication from User.alice: User.bob"
    assert other.reason == other.error_message and not other.mechanism_failure
    assert s.admit(METADATA, 4100) is Admission.UNAUTHENTICATED


def test_no_request_is_served_between_a_reauthentication_handshake_and_its_end() -> None:
    s = logged_in(session(max_reauth=3000))
    assert s.handshake("TEST", 1, 2500).error_code == 0
    # Kafka's SaslServerAuthenticator: the re-authentication owns the connection until it ends.
    for key in (METADATA, PRODUCE, API_VERSIONS):
        assert s.admit(key, 2600) is Admission.DURING_AUTHENTICATION
    assert s.admit(SASL_AUTHENTICATE, 2600) is Admission.SASL
    refused = s.refuse_during_authentication("PRODUCE")
    assert refused.error_code == ILLEGAL_SASL_STATE and refused.failed and refused.reauthentication
    assert refused.error_message == "Unexpected Kafka request of type PRODUCE during SASL authentication."
    assert not refused.silent and refused.reason == refused.error_message
    assert s.admit(METADATA, 2600) is Admission.UNAUTHENTICATED
    assert s.authenticate(b"alice:pw", 2700).failed


def test_a_request_during_a_first_login_fails_it_the_same_way() -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    refused = s.refuse_during_authentication("METADATA")
    assert refused.failed and refused.error_code == ILLEGAL_SASL_STATE and not refused.reauthentication


def test_a_second_handshake_during_an_exchange_fails_it() -> None:
    s = logged_in(session(max_reauth=3000))
    s.handshake("TEST", 1, 2500)
    again = s.handshake("TEST", 1, 3600)
    assert again.failed and again.error_code == ILLEGAL_SASL_STATE and again.reauthentication
    assert "SASL_HANDSHAKE" in (again.error_message or "")


def test_reauthentication_at_most_one_start_a_second_refused_without_closing() -> None:
    s = logged_in(session(max_reauth=3000))
    s.handshake("TEST", 1, 1000)
    assert s.authenticate(b"alice:pw", 1100).done  # session now ends at 4100
    early = s.handshake("TEST", 1, 1999)
    assert early.error_code == ILLEGAL_SASL_STATE and not early.failed and early.reauthentication
    assert early.reason is not None and "second" in early.reason
    assert s.admit(METADATA, 1999) is Admission.SERVE  # the session goes on, as on a broker
    assert s.admit(SASL_HANDSHAKE, 2000) is Admission.SASL and s.handshake("TEST", 1, 2000).error_code == 0


def test_an_early_handshake_on_an_expired_session_closes() -> None:
    s = logged_in(session(max_reauth=1000))
    s.handshake("TEST", 1, 900)
    assert s.authenticate(b"alice:pw", 900).done  # expires at 1900; next start allowed from 1900
    assert s.admit(SASL_HANDSHAKE, 1899) is Admission.SASL  # early, session still valid: answered 34
    s2 = logged_in(session(max_reauth=500))
    s2.handshake("TEST", 1, 400)
    assert s2.authenticate(b"alice:pw", 400).done  # expires at 900, next start allowed from 1400
    assert s2.admit(SASL_HANDSHAKE, 1000) is Admission.SESSION_EXPIRED
    assert s2.admit(SASL_HANDSHAKE, 1400) is Admission.SASL  # an expired session may still re-authenticate


def test_reauthentication_needs_an_expiring_session() -> None:
    s = logged_in(session())
    refused = s.handshake("TEST", 1, 5000)
    assert refused.error_code == ILLEGAL_SASL_STATE and not refused.failed and refused.reauthentication
    assert refused.reason is not None and s.admit(METADATA, 5000) is Admission.SERVE


def test_after_expiry_only_a_reauthentication_handshake_is_admitted() -> None:
    s = logged_in(session(max_reauth=3000))
    for key in (METADATA, API_VERSIONS, SASL_AUTHENTICATE):
        assert s.admit(key, 3000) is Admission.SESSION_EXPIRED
    assert s.admit(SASL_HANDSHAKE, 3000) is Admission.SASL
    assert s.handshake("TEST", 1, 3000).error_code == 0
    assert s.authenticate(b"alice:pw", 3001).done and s.admit(METADATA, 3002) is Admission.SERVE


def test_sasl_authenticate_after_login_is_answered_and_the_session_goes_on() -> None:
    s = logged_in(session())
    step = s.authenticate(b"alice:pw", 10)
    assert step.error_code == ILLEGAL_SASL_STATE and not step.failed and step.reason is None
    assert step.error_message == "SaslAuthenticate request received after successful authentication"
    assert s.admit(METADATA, 10) is Admission.SERVE


def test_reauthentication_with_another_mechanism_fails_unanswered_on_the_next_request() -> None:
    made: list[Principal | None] = []
    s = logged_in(session(max_reauth=3000, made=made, enabled=("TEST", "OTHER")))
    step = s.handshake("OTHER", 1, 2000)
    assert step.error_code == 0 and not step.failed  # as Kafka: the handshake itself succeeds
    assert len(made) == 1  # no mechanism was created for it
    refused = s.authenticate(b"alice:pw", 2100)
    assert refused.failed and refused.silent and refused.reauthentication
    assert refused.reason == ("SASL mechanism 'OTHER' requested by client is not supported for re-authentication "
                              "of mechanism 'TEST'")
    s2 = logged_in(session(max_reauth=3000, enabled=("TEST", "OTHER")))
    s2.handshake("OTHER", 1, 2000)
    assert s2.admit(METADATA, 2000) is Admission.DURING_AUTHENTICATION
    assert s2.refuse_during_authentication("METADATA").silent


def test_reauthentication_with_a_mechanism_not_enabled_is_33() -> None:
    s = logged_in(session(max_reauth=3000))
    step = s.handshake("GSSAPI", 1, 2000)
    assert step.error_code == UNSUPPORTED_SASL_MECHANISM and step.failed and step.reauthentication


def test_a_failed_reauthentication_says_so() -> None:
    s = logged_in(session(max_reauth=3000))
    s.handshake("TEST", 1, 2000)
    step = s.authenticate(b"alice:nope", 2100)
    assert step.failed and step.reauthentication and step.mechanism_failure
    assert step.error_message == ("Authentication failed during re-authentication due to invalid credentials with "
                                  "SASL mechanism TEST")


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


def test_a_second_api_versions_before_the_handshake_is_refused() -> None:
    # Kafka's handleApiVersionsRequest: only in HANDSHAKE_OR_VERSIONS_REQUEST; the answer moves the
    # state to HANDSHAKE_REQUEST, where another ApiVersions throws IllegalStateException (a close).
    s = session()
    assert s.admit(API_VERSIONS, 0) is Admission.SERVE
    s.api_versions_answered()
    assert s.admit(API_VERSIONS, 0) is Admission.VERSIONS_ALREADY_ANSWERED
    assert s.admit(SASL_HANDSHAKE, 0) is Admission.SASL  # the handshake is still welcome
    assert s.handshake("TEST", 1, 0).error_code == 0
    assert s.admit(API_VERSIONS, 0) is Admission.DURING_AUTHENTICATION  # answered 34 during an exchange, as before


def test_an_unsupported_version_answer_does_not_count_and_an_authenticated_session_answers_any() -> None:
    s = session()
    assert s.admit(API_VERSIONS, 0) is Admission.SERVE  # answered UNSUPPORTED_VERSION: not marked
    assert s.admit(API_VERSIONS, 0) is Admission.SERVE
    s.api_versions_answered()
    logged_in(s)
    s.api_versions_answered()  # after login KafkaApis answers ApiVersions as often as asked
    assert [s.admit(API_VERSIONS, 0) for _ in range(2)] == [Admission.SERVE, Admission.SERVE]


def test_an_oversized_frame_fails_the_exchange_unanswered() -> None:
    s = session()
    assert s.authenticating
    step = s.refuse_frame("frame of 600000 bytes exceeds the maximum of 524288")
    assert (step.failed, step.silent, step.reauthentication, step.mechanism_failure) == (True, True, False, False)
    assert step.error_message == "Failing SASL authentication due to invalid receive size"
    assert step.reason == ("Failing SASL authentication due to invalid receive size: "
                           "frame of 600000 bytes exceeds the maximum of 524288")
    assert s.admit(SASL_HANDSHAKE, 0) is Admission.UNAUTHENTICATED  # the session is over


def test_an_oversized_frame_during_a_reauthentication_is_a_failed_reauthentication() -> None:
    s = logged_in(session(max_reauth=10_000))
    assert not s.authenticating  # the full request size applies
    assert s.handshake("TEST", 1, 5_000).error_code == 0
    assert s.authenticating
    step = s.refuse_frame("negative frame size -1")
    assert step.failed and step.silent and step.reauthentication
    assert s.principal == Principal("User", "alice")  # the audit names the session being renewed
    assert s.admit(METADATA, 5_000) is Admission.UNAUTHENTICATED


def test_a_step_in_two_halves_takes_no_other_request_until_its_outcome() -> None:
    s = session(max_reauth=60_000)
    s.handshake("TEST", 1, 0)
    begun = s.begin_authenticate(b"alice:pw")
    assert isinstance(begun, MechanismStep) and s.stepping
    with pytest.raises(RuntimeError):
        s.admit(METADATA, 0)
    with pytest.raises(RuntimeError):
        s.begin_authenticate(b"alice:pw")
    with pytest.raises(RuntimeError):
        s.refuse_frame("frame of 600000 bytes")
    outcome = begun.run()  # the caller's worker thread
    step = s.finish_authenticate(outcome, 5_000)
    assert step.done and not s.stepping and s.session_expires_ms == 65_000  # counted from the outcome
    with pytest.raises(RuntimeError):
        s.finish_authenticate(outcome, 5_000)
    assert s.admit(METADATA, 6_000) is Admission.SERVE


def test_a_step_that_needs_no_mechanism_work_is_answered_at_once() -> None:
    s = logged_in(session())
    after = s.begin_authenticate(b"alice:pw")
    assert isinstance(after, AuthStep) and after.error_code == ILLEGAL_SASL_STATE and not s.stepping
    early = session().begin_authenticate(b"alice:pw")
    assert isinstance(early, AuthStep) and early.failed


def test_a_crashing_mechanism_step_fails_closed_off_the_loop_too() -> None:
    s = session()
    s.handshake("TEST", 1, 0)
    begun = s.begin_authenticate(b"boom:pw")
    assert isinstance(begun, MechanismStep)
    outcome = begun.run()
    assert outcome.crashed and isinstance(outcome.step, Failure)
    step = s.finish_authenticate(outcome, 0)
    assert step.failed and not step.mechanism_failure and step.reason == "mechanism error: RuntimeError"


@pytest.mark.parametrize("reauth", [False, True])
def test_a_step_that_could_not_run_ends_the_exchange_unanswered_without_a_word_on_the_credential(reauth: bool) -> None:
    s = logged_in(session(max_reauth=60_000)) if reauth else session()
    s.handshake("TEST", 1, 10_000)
    assert isinstance(s.begin_authenticate(b"alice:pw"), MechanismStep)
    step = s.refuse_step("too many SASL steps waiting")
    assert not s.stepping and s.state is State.FAILED
    # Closed without an answer (a busy broker looks like one gone away): no error 58, which Java clients
    # take as fatal.
    assert step.failed and step.silent and step.data == b""
    assert step.reauthentication is reauth and not step.mechanism_failure
    assert step.reason == "too many SASL steps waiting"
    assert step.error_message == ("closed unanswered: the gateway is busy authenticating other clients; the client "
                                  "retries")
    # The same whatever the credential: the mechanism never saw it.
    other = session()
    other.handshake("TEST", 1, 10_000)
    assert isinstance(other.begin_authenticate(b"nobody:wrong"), MechanismStep)
    refused = other.refuse_step("too many SASL steps waiting")
    assert (refused.error_message, refused.data, refused.silent) == (step.error_message, step.data, step.silent)
