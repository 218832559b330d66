"""SASL on one client connection, as a broker's SaslServerAuthenticator does it (sans-I/O, STYLE 2).

Drives a `sasl.mechanism.ServerMechanism` through SaslHandshake (v0/v1) and SaslAuthenticate and
keeps the KIP-368 session: lifetime = min(credential expiry, `max_reauth_ms`), re-authentication
with the same mechanism and principal, at most one start a second. The caller owns the socket, the
failure delay and the audit trail; it asks `admit(api_key, now)` about every request first.

A SaslAuthenticate may cost a key derivation (PLAIN, a delegation token's SCRAM client-first) or a
signature check (OAUTHBEARER), so it comes in two halves: `begin_authenticate` answers at once or
hands out the `MechanismStep`, which the caller runs where it likes (gateway.proxy: a worker thread),
and `finish_authenticate` turns its outcome into the answer (`refuse_step` when it could not run).
In between the session takes no other request (`admit` raises): the caller serves none.

What Kafka's broker does, and so this session (apache/kafka `SocketServer.Processor.
processCompletedReceives`, `KafkaChannel.maybeBeginServerReauthentication`, `SaslServerAuthenticator`):
- before the first SaslHandshake one ApiVersions is answered (`api_versions_answered`); a second one
  closes the connection at once, unanswered (`handleApiVersionsRequest` throws IllegalStateException
  once the state is HANDSHAKE_REQUEST; not an authentication failure, so no delay). An ApiVersions
  answered UNSUPPORTED_VERSION (KIP-511) does not count: the client retries with the version offered;
- a frame over `sasl.server.max.receive.size` during an exchange, first login or re-authentication,
  fails it like wrong credentials: delayed close, without an answer (`refuse_frame`);
- between a SaslHandshake and the SaslAuthenticate that completes the exchange, first login and
  re-authentication alike, any other request is answered with its own error response carrying
  ILLEGAL_SASL_STATE and fails the exchange (close after the failure delay);
- a SaslHandshake on an authenticated connection begins a re-authentication only if the session
  expires and the last re-authentication began at least a second ago; otherwise it is answered
  ILLEGAL_SASL_STATE and the connection goes on (until its session expires);
- once the session has expired, every request except a SaslHandshake that begins a re-authentication
  closes the connection at once, unanswered;
- a re-authentication that names another enabled mechanism gets a successful SaslHandshake answer,
  then the next request fails the exchange unanswered; one that proves another principal fails.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from authz.model import Principal
from sasl.mechanism import Challenge, Failure, ServerMechanism, Step, Success, UnsupportedMechanismError

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
MIN_REAUTH_INTERVAL_MS = 1000  # Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS


class MechanismFactory(Protocol):
    """A fresh server mechanism for one exchange. `reauthenticating` is the principal whose session a
    re-authentication renews (None for a first login), so the mechanism's own audit can say so."""

    def __call__(
        self, name: str, client_address: str, *, reauthenticating: Principal | None = None
    ) -> ServerMechanism: ...


class State(enum.Enum):
    AWAIT_HANDSHAKE = "await-handshake"
    AWAIT_AUTHENTICATE = "await-authenticate"
    REAUTH_BAD_MECHANISM = "reauth-bad-mechanism"  # Kafka's state of the same name
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class Admission(enum.Enum):
    """What the caller does with one request, before looking at it further."""

    SERVE = "serve"  # an authenticated, unexpired session: serve it (ApiVersions included)
    SASL = "sasl"  # a SaslHandshake or SaslAuthenticate: `handshake()` / `authenticate()` answer it
    UNAUTHENTICATED = "unauthenticated"  # before any SaslHandshake: close at once, unanswered
    # A second ApiVersions before the SaslHandshake: close at once, unanswered, not an authentication failure.
    VERSIONS_ALREADY_ANSWERED = "versions-already-answered"
    DURING_AUTHENTICATION = "during-authentication"  # `refuse_during_authentication()` answers it
    SESSION_EXPIRED = "session-expired"  # close at once, unanswered (Kafka: "Disconnecting expired channel")


@dataclass(frozen=True, slots=True)
class AuthStep:
    """What to answer to one SaslHandshake, SaslAuthenticate (or raw v0 token), or to a request that
    arrived during an exchange; and whether it is an authentication outcome to audit."""

    error_code: int
    error_message: str | None
    data: bytes
    session_lifetime_ms: int = 0
    done: bool = False  # authenticated (the connection may now serve requests)
    failed: bool = False  # close the connection after answering (after the failure delay)
    reason: str | None = None  # for the audit trail only; set on every refusal worth an audit event
    reauthentication: bool = False
    silent: bool = False  # close without answering at all
    mechanism_failure: bool = False  # the mechanism itself refused (and audits that itself, if it does)
    token_id: str | None = None  # the delegation token the login used or named, for the audit trail


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one mechanism step answered; `crashed`: the mechanism raised (a Failure stands in)."""

    step: Step
    crashed: bool = False


@dataclass(frozen=True, slots=True)
class MechanismStep:
    """One step of the exchange's mechanism, for the caller to run where it likes (a mechanism may
    derive a key, verify a signature or read a store: `gateway.proxy` runs it on a worker thread).
    Only this step touches the mechanism while it runs; `run` never raises."""

    mechanism: ServerMechanism
    data: bytes = field(repr=False)

    def run(self) -> StepOutcome:
        try:
            return StepOutcome(self.mechanism.step(self.data))
        except Exception as exc:  # a mechanism must never take the gateway down; garbage fails closed
            return StepOutcome(Failure(reason=f"mechanism error: {type(exc).__name__}"), crashed=True)


class SaslSession:
    def __init__(
        self,
        *,
        enabled: Sequence[str],
        factory: MechanismFactory,
        client_address: str,
        max_reauth_ms: int = 0,
    ) -> None:
        self.enabled = tuple(enabled)
        self._factory = factory
        self._client_address = client_address
        self._max_reauth_ms = max_reauth_ms
        self.state = State.AWAIT_HANDSHAKE
        self.mechanism_name: str | None = None
        self.principal: Principal | None = None  # during a re-authentication: the session's, until it succeeds
        self.token_authenticated = False
        self.handshake_version = 1
        self.session_expires_ms: int | None = None
        self._mechanism: ServerMechanism | None = None
        self._reauthenticating = False
        self._last_reauth_start_ms: int | None = None
        self._bad_mechanism_message = ""
        self._versions_answered = False  # Kafka's HANDSHAKE_REQUEST state (vs HANDSHAKE_OR_VERSIONS_REQUEST)
        self._stepping = False  # a mechanism step is running (`begin_authenticate`, `finish_authenticate`)

    @property
    def reauthenticating(self) -> bool:
        return self._reauthenticating

    @property
    def authenticating(self) -> bool:
        """True until the first exchange succeeds and from a re-authentication's SaslHandshake to its
        end: the frames read meanwhile are bounded by `sasl.server.max.receive.size`."""
        return self.state is not State.AUTHENTICATED

    def api_versions_answered(self) -> None:
        """The caller answered an ApiVersions before the SaslHandshake (successfully: an answer with
        UNSUPPORTED_VERSION or INVALID_REQUEST does not count, as in Kafka)."""
        if self.state is State.AWAIT_HANDSHAKE:
            self._versions_answered = True

    def admit(self, api_key: int, now_ms: int) -> Admission:
        self._check_not_stepping()
        state = self.state
        if state is State.AUTHENTICATED:
            if api_key == SASL_HANDSHAKE and self._reauth_refusal(now_ms) is None:
                return Admission.SASL
            # Kafka compares nanoseconds (now > expiry); in milliseconds `>=` errs toward closing.
            if self.session_expires_ms is not None and now_ms >= self.session_expires_ms:
                return Admission.SESSION_EXPIRED
            return Admission.SASL if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE) else Admission.SERVE
        if state is State.AWAIT_HANDSHAKE:
            # Kafka's handleKafkaRequest: anything but ApiVersions and SaslHandshake (SaslAuthenticate
            # included) closes the connection, unanswered.
            if api_key == API_VERSIONS:
                return Admission.VERSIONS_ALREADY_ANSWERED if self._versions_answered else Admission.SERVE
            return Admission.SASL if api_key == SASL_HANDSHAKE else Admission.UNAUTHENTICATED
        if state is State.FAILED:
            return Admission.UNAUTHENTICATED
        # AWAIT_AUTHENTICATE or REAUTH_BAD_MECHANISM: only SaslAuthenticate belongs here (a second
        # SaslHandshake too is refused by `handshake`, as Kafka's handleSaslToken refuses it).
        return Admission.SASL if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE) else Admission.DURING_AUTHENTICATION

    def _reauth_refusal(self, now_ms: int) -> str | None:
        """Why a SaslHandshake on this authenticated connection may not begin a re-authentication."""
        if self.session_expires_ms is None:
            return "re-authentication refused: the session does not expire"
        last = self._last_reauth_start_ms
        if last is not None and now_ms - last < MIN_REAUTH_INTERVAL_MS:
            return "re-authentication refused: less than a second after the previous one began"
        return None

    def handshake(self, mechanism: str, version: int, now_ms: int) -> AuthStep:
        """Answers a SaslHandshake: error 0, UNSUPPORTED_SASL_MECHANISM or ILLEGAL_SASL_STATE."""
        self._check_not_stepping()
        if self.state is State.AUTHENTICATED:
            refusal = self._reauth_refusal(now_ms)
            if refusal is not None:
                # Kafka's KafkaApis answers this handshake itself; the session goes on unchanged.
                return AuthStep(ILLEGAL_SASL_STATE, None, b"", reason=refusal, reauthentication=True)
            self._last_reauth_start_ms = now_ms
            self._reauthenticating = True
        elif self.state is not State.AWAIT_HANDSHAKE:
            return self.refuse_during_authentication("SASL_HANDSHAKE")
        reauth = self._reauthenticating
        try:
            if mechanism not in self.enabled:
                raise UnsupportedMechanismError(mechanism)
            if reauth and mechanism != self.mechanism_name:
                # Kafka answers this handshake with success and fails on the next request, unanswered.
                self._bad_mechanism_message = (
                    f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication "
                    f"of mechanism '{self.mechanism_name}'")
                self.state = State.REAUTH_BAD_MECHANISM
                return AuthStep(0, None, b"", reauthentication=True)
            self._mechanism = self._factory(
                mechanism, self._client_address, reauthenticating=self.principal if reauth else None)
        except UnsupportedMechanismError:
            self.state = State.FAILED
            return AuthStep(UNSUPPORTED_SASL_MECHANISM, None, b"", failed=True, reason="unsupported SASL mechanism",
                            reauthentication=reauth)
        self.mechanism_name = mechanism
        self.handshake_version = version
        self.state = State.AWAIT_AUTHENTICATE
        return AuthStep(0, None, b"", reauthentication=reauth)

    def refuse_during_authentication(self, api_name: str) -> AuthStep:
        """A request other than SaslAuthenticate between SaslHandshake and the end of the exchange:
        the exchange fails (Kafka's IllegalSaslStateException; the caller answers the request with its
        own error response carrying `error_code`)."""
        self._check_not_stepping()
        reauth = self._reauthenticating
        if self.state is State.REAUTH_BAD_MECHANISM:
            return self._fail_bad_mechanism()
        self.state = State.FAILED
        message = f"Unexpected Kafka request of type {api_name} during SASL authentication."
        return AuthStep(ILLEGAL_SASL_STATE, message, b"", failed=True, reason=message, reauthentication=reauth)

    def refuse_frame(self, detail: str) -> AuthStep:
        """A frame over the pre-authentication size limit (or with a negative size) during an exchange:
        Kafka's SaslServerAuthenticator.authenticate turns the InvalidReceiveException into a
        SaslAuthenticationException, so the connection is closed after the failure delay, unanswered.
        `detail` (the sizes) goes to the audit reason only."""
        self._check_not_stepping()
        reauth = self._reauthenticating
        self.state = State.FAILED
        message = "Failing SASL authentication due to invalid receive size"
        return AuthStep(SASL_AUTHENTICATION_FAILED, message, b"", failed=True, silent=True,
                        reason=f"{message}: {detail}", reauthentication=reauth)

    def _fail_bad_mechanism(self) -> AuthStep:
        self.state = State.FAILED
        message = self._bad_mechanism_message
        return AuthStep(SASL_AUTHENTICATION_FAILED, message, b"", failed=True, silent=True, reason=message,
                        reauthentication=True)

    @property
    def stepping(self) -> bool:
        """A mechanism step began (`begin_authenticate`) and its outcome is not in yet (`finish_authenticate`)."""
        return self._stepping

    def _check_not_stepping(self) -> None:
        if self._stepping:
            # The caller's bug: the next request was served before the running step's outcome.
            raise RuntimeError("a SASL mechanism step is still running on this connection")

    def authenticate(self, data: bytes, now_ms: int) -> AuthStep:
        """A SaslAuthenticate (or raw v0 token), its mechanism step run here, on the caller's thread."""
        begun = self.begin_authenticate(data)
        if isinstance(begun, AuthStep):
            return begun
        return self.finish_authenticate(begun.run(), now_ms)

    def begin_authenticate(self, data: bytes) -> AuthStep | MechanismStep:
        """The first half of `authenticate`: an answer at once (no mechanism work: out of state), or
        the mechanism step to run, anywhere (a worker thread), before `finish_authenticate` takes its
        outcome (or `refuse_step` says it could not run). In between this session serves nothing."""
        self._check_not_stepping()
        if self.state is State.AUTHENTICATED:
            # KafkaApis' answer; not an authentication attempt, and the session goes on.
            return AuthStep(ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication",
                            b"")
        if self.state is State.REAUTH_BAD_MECHANISM:
            return self._fail_bad_mechanism()
        if self.state is not State.AWAIT_AUTHENTICATE or self._mechanism is None:
            self.state = State.FAILED
            return AuthStep(ILLEGAL_SASL_STATE, "Unexpected SASL authenticate request", b"", failed=True,
                            reason="SaslAuthenticate before SaslHandshake")
        self._stepping = True
        return MechanismStep(self._mechanism, data)

    def refuse_step(self, reason: str) -> AuthStep:
        """The caller could not run the step `begin_authenticate` gave (too many steps waiting): the
        exchange ends, and the connection is closed without an answer (after the failure delay, as any
        failed exchange), as a broker that went away would leave it. A client then reconnects after its
        backoff, where the error 58 of a failed login is fatal to Java clients
        (`NetworkClient.processDisconnection`: AUTHENTICATION_FAILED keeps an AuthenticationException
        that the producer and consumer raise; a close in AUTHENTICATE is a disconnect, retried). Nothing
        in it depends on the credential, which was not looked at. `reason` goes to the audit event only.
        Only a first login is refused: re-authentications always wait."""
        self._stepping = False
        self.state = State.FAILED
        reauth = self._reauthenticating
        message = "closed unanswered: the gateway is busy authenticating other clients; the client retries"
        return AuthStep(SASL_AUTHENTICATION_FAILED, message, b"", failed=True, silent=True, reason=reason,
                        reauthentication=reauth)

    def finish_authenticate(self, outcome: StepOutcome, now_ms: int) -> AuthStep:
        """The second half of `authenticate`: the answer to the step's outcome. `now_ms` is when the
        outcome came, so a session's lifetime counts from the answer."""
        if not self._stepping:
            raise RuntimeError("no SASL mechanism step is running on this connection")
        self._stepping = False
        step, crashed = outcome.step, outcome.crashed
        reauth = self._reauthenticating
        if isinstance(step, Challenge):
            return AuthStep(0, None, step.data, reauthentication=reauth)
        if isinstance(step, Success):
            old = self.principal
            if reauth and old is not None and step.principal != old:
                self.state = State.FAILED
                message = (f"Cannot change principals during re-authentication from {old.type}.{old.name}: "
                           f"{step.principal.type}.{step.principal.name}")
                return AuthStep(SASL_AUTHENTICATION_FAILED, message, b"", failed=True, reason=message,
                                reauthentication=True)
            # A credential lifetime of 0 (expired) is a session that has already expired, as in Kafka:
            # mechanisms refuse such credentials, and if one did not, no request could be served.
            limits = [x for x in (step.session_lifetime_ms, self._max_reauth_ms or None) if x is not None]
            lifetime = max(min(limits), 0) if limits else 0
            self.session_expires_ms = now_ms + lifetime if limits else None
            self.principal = step.principal
            self.token_authenticated = step.token_authenticated
            self.state = State.AUTHENTICATED
            self._reauthenticating = False
            return AuthStep(0, None, step.data, session_lifetime_ms=lifetime, done=True, reauthentication=reauth,
                            token_id=step.token_id)
        self.state = State.FAILED
        message = (
            f"Authentication failed during {'re-authentication' if reauth else 'authentication'} due to invalid "
            f"credentials with SASL mechanism {self.mechanism_name}"
        )
        return AuthStep(SASL_AUTHENTICATION_FAILED, message, step.data, failed=True, reason=step.reason,
                        reauthentication=reauth, mechanism_failure=not crashed, token_id=step.token_id)
