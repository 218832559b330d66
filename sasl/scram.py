"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks it (KIP-84), sans-I/O.

Kafka specifics mirrored here: no SASLprep (the password is its UTF-8 bytes), only the gs2 header
`n` (no channel binding), the `tokenauth=true` extension for delegation tokens (other extensions
are ignored), iterations between 4096 and 16384.

Deliberate differences from Kafka's server, both stricter and invisible to real clients:
- `c=` must equal base64 of the client's gs2 header (RFC 5802; Kafka only mixes it into AuthMessage);
- an unknown user gets a server-first message built from a fake credential that is stable per
  name, so unknown users and wrong passwords fail at the same step (Kafka fails unknown users at
  the first message, which tells an attacker the user does not exist). The credential service keys
  it with a secret shared through the database (same salt on every node and after a restart) and
  draws its iteration count and salt form per name from those of the stored credentials, in their
  proportions (`pick_fake_shape`), so neither the salt's stability nor its shape gives a name away.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from authz.model import Principal
from sasl.mechanism import Challenge, Failure, Step, Success
from sasl.session import session_lifetime_ms

MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
DEFAULT_ITERATIONS: Final = 8192
TOKEN_AUTH_EXTENSION: Final = "tokenauth"  # noqa: S105 - an extension name, not a secret


class ScramError(Exception):
    """A SCRAM exchange failed. The message is for logs and the audit trail, never for the peer."""


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    hash_name: str
    min_iterations: int = MIN_ITERATIONS
    max_iterations: int = MAX_ITERATIONS

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hash(self, data: bytes) -> bytes:
        return _HASHES[self.hash_name](data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.digest(key, data, self.hash_name)

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        # Kafka's ScramFormatter.normalize: the UTF-8 bytes, no SASLprep.
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


_HASHES: Final = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}
SCRAM_SHA_256: Final = ScramMechanism("SCRAM-SHA-256", "sha256")
SCRAM_SHA_512: Final = ScramMechanism("SCRAM-SHA-512", "sha512")
MECHANISMS: Final[Mapping[str, ScramMechanism]] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


def mechanism_named(name: str) -> ScramMechanism:
    try:
        return MECHANISMS[name.upper()]
    except KeyError:
        raise ValueError(
            f"Unknown SCRAM mechanism {name!r}; expected one of {', '.join(MECHANISMS)}"
        ) from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores per user and mechanism (Kafka's ScramCredential). Never the password."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def credential_from_salted(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=mechanism.hash(client_key),
        server_key=mechanism.hmac(salted, b"Server Key"),
        iterations=iterations,
    )


def new_salt() -> bytes:
    return secrets.token_bytes(24)


def derive_credential(
    mechanism: ScramMechanism,
    password: str,
    *,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """PBKDF2 happens here, once, when a credential is created."""
    check_iterations(mechanism, iterations)
    salt = new_salt() if salt is None else salt
    return credential_from_salted(
        mechanism, mechanism.salted_password(password, salt, iterations), salt, iterations
    )


def check_iterations(mechanism: ScramMechanism, iterations: int) -> None:
    """Kafka's ScramControlManager wording (UNACCEPTABLE_CREDENTIAL)."""
    if iterations < mechanism.min_iterations:
        raise ValueError(
            f"Too few iterations: {iterations} is less than the minimum {mechanism.min_iterations}"
        )
    if iterations > mechanism.max_iterations:
        raise ValueError(
            f"Too many iterations: {iterations} is more than the maximum {mechanism.max_iterations}"
        )


def encode_sasl_name(name: str) -> str:
    """RFC 5802 saslname: `=` -> `=3D`, `,` -> `=2C` (in that order, as Kafka's ScramFormatter.saslName)."""
    return name.replace("=", "=3D").replace(",", "=2C")


_ESCAPE = re.compile(r"=(2C|3D)|=")


def decode_sasl_name(saslname: str) -> str:
    def repl(m: re.Match[str]) -> str:
        if m.group(1) is None:
            raise ScramError("Invalid username encoding")
        return "," if m.group(1) == "2C" else "="

    return _ESCAPE.sub(repl, saslname)


# Kafka's ScramMessages grammar, widened to UTF-8 names (Kafka's [\x01-\x7F] would refuse non-ASCII).
_SASLNAME = r"(?:[^\x00=,]|=2C|=3D)+"
_VALUE = r"[^\x00,]+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?P<bare>(?P<reserved>m={_VALUE},)?"
    rf"n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))",
    re.DOTALL,
)
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+){_EXTENSIONS}"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<binding>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})"
)
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>[^\x00=,]+)|v=(?P<signature>{_BASE64})){_EXTENSIONS}")


def _parse_extensions(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(",")[1:]:
        key, _, value = item.partition("=")
        out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str
    authzid: str
    username: str
    nonce: str
    extensions: Mapping[str, str]
    bare: str

    @property
    def token_auth(self) -> bool:
        return self.extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true"


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("Invalid SCRAM message: not UTF-8") from None


def parse_client_first(data: bytes) -> ClientFirst:
    m = _CLIENT_FIRST.fullmatch(_text(data))
    if m is None:
        raise ScramError("Invalid SCRAM client first message format")
    if m.group("reserved"):
        raise ScramError("Mandatory SCRAM extension (m=) not supported")
    return ClientFirst(
        gs2_header=m.group("gs2"),
        authzid=decode_sasl_name(m.group("authzid")) if m.group("authzid") else "",
        username=decode_sasl_name(m.group("saslname")),
        nonce=m.group("nonce"),
        extensions=_parse_extensions(m.group("extensions")),
        bare=m.group("bare"),
    )


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ScramError("Invalid base64") from None


@dataclass(frozen=True, slots=True)
class ScramIdentity:
    """What the credential lookup answers for a SCRAM user name (or a delegation-token id)."""

    principal: Principal
    credential: ScramCredential
    token_authenticated: bool = False
    # The first millisecond at which the credential no longer authenticates (None: never).
    expiry_ms: int | None = None


# Looks a name up: `(username, tokenauth) -> identity or None`. Must not raise for unknown names.
CredentialLookup = Callable[[str, bool], "ScramIdentity | None"]

# Only for servers built without a shared key (tests, tools); the credential service passes the
# database's `scram-unknown-user` secret so all nodes and restarts agree.
_PROCESS_FAKE_KEY: Final = secrets.token_bytes(32)
BASE36: Final = b"0123456789abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True, slots=True)
class FakeCredentialShape:
    """How the credential shown for an unknown name looks: like the real credentials (`pick_fake_shape`).

    Kafka's tools make 4096-iteration credentials whose salt is a base-36 string (AlterUserScramCredentials
    from `kafka-configs.sh`); kgov's own are 8192 by default with 24 random bytes. A fake that always
    had kgov's shape would mark every Kafka-made user as real, and the reverse.
    """

    iterations: int = DEFAULT_ITERATIONS
    salt_length: int = 24
    salt_alphabet: bytes | None = None  # None: any byte; else the salt is text over these characters


def salt_alphabet_of(salt: bytes) -> bytes | None:
    return BASE36 if salt and all(b in BASE36 for b in salt) else None


@dataclass(frozen=True, slots=True)
class ShapeCensus:
    """How many stored credentials of one mechanism have each shape, in a fixed order (`shape_census`).
    Empty when there are none; `pick_fake_shape` then answers `default`."""

    counts: tuple[tuple[FakeCredentialShape, int], ...]
    default: FakeCredentialShape


def _shape_order(shape: FakeCredentialShape) -> tuple[int, int, bytes]:
    return shape.iterations, shape.salt_length, shape.salt_alphabet or b""


def shape_census(credentials: Iterable[ScramCredential], default: FakeCredentialShape) -> ShapeCensus:
    """Counts (iterations, salt length, salt alphabet) among `credentials`; the order does not depend on
    theirs, so every node holding the same credentials builds the same census."""
    counts: Counter[FakeCredentialShape] = Counter(
        FakeCredentialShape(c.iterations, len(c.salt), salt_alphabet_of(c.salt)) for c in credentials
    )
    return ShapeCensus(tuple(sorted(counts.items(), key=lambda kv: _shape_order(kv[0]))), default)


def pick_fake_shape(census: ShapeCensus, mechanism: ScramMechanism, username: str, *, key: bytes) -> FakeCredentialShape:
    """The shape of the credential shown for `username`, which has none: drawn from the stored
    credentials' shapes in proportion to how many have each, by a keyed hash of the name (weighted
    rendezvous hashing), so it is the same on every attempt and every node, and over many names the
    fakes look like the population. Showing every unknown name the commonest shape would single out
    each user with another (a user made with `--iterations 16384` among 8192s).

    Rendezvous hashing keeps names where they are when the population changes: a new shape takes
    names only for itself (in proportion to its count) and moves no name between the other shapes.
    What is left: a prober watching one name over time may see its fake shape change when someone
    else's credential is created or removed (a real user's shape changes only with its own credential);
    each such change moves few names, and only toward or away from the shape that changed."""
    if not census.counts:
        return census.default
    seed = f"{mechanism.name}\x00{username}\x00".encode()
    best: tuple[float, FakeCredentialShape] | None = None
    for shape, count in census.counts:
        label = b"shape\x00" + seed + repr(_shape_order(shape)).encode()
        draw = int.from_bytes(mechanism.hmac(key, label)[:8], "big")
        # -ln(u) / weight with u uniform in (0, 1]: the smallest wins with probability weight / total.
        score = -math.log((draw + 1) / 2**64) / count
        if best is None or score < best[0]:
            best = (score, shape)
    assert best is not None
    return best[1]


def _keyed_bytes(mechanism: ScramMechanism, key: bytes, label: bytes, length: int) -> bytes:
    out = b""
    counter = 0
    while len(out) < length:
        out += mechanism.hmac(key, label + counter.to_bytes(4, "big"))
        counter += 1
    return out[:length]


def fake_salt(mechanism: ScramMechanism, username: str, *, key: bytes, shape: FakeCredentialShape) -> bytes:
    """The salt shown for a name that has none: keyed by a server secret and the name, so it is the
    same on every attempt (as a real user's) and unpredictable without the key."""
    seed = f"{mechanism.name}\x00{username}".encode()
    salt = _keyed_bytes(mechanism, key, b"salt\x00" + seed, shape.salt_length)
    if shape.salt_alphabet is not None:
        salt = bytes(shape.salt_alphabet[b % len(shape.salt_alphabet)] for b in salt)
    return salt


def fake_credential(
    mechanism: ScramMechanism, username: str, *, key: bytes, shape: FakeCredentialShape
) -> ScramCredential:
    """The credential shown for a name that has none, with `fake_salt`. Its StoredKey is random too,
    so no proof can ever match it."""
    seed = f"{mechanism.name}\x00{username}".encode()
    return ScramCredential(
        salt=fake_salt(mechanism, username, key=key, shape=shape),
        stored_key=mechanism.hmac(key, b"stored\x00" + seed),
        server_key=mechanism.hmac(key, b"server\x00" + seed),
        iterations=shape.iterations,
    )


# `(username, tokenauth) -> the credential to show for a name the lookup did not find`.
UnknownCredential = Callable[[str, bool], ScramCredential]


def default_nonce() -> str:
    """144 random bits as URL-safe base64: printable ASCII without `,` (Kafka uses 130 bits in base 36)."""
    return secrets.token_urlsafe(18)


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


class ScramServer:
    """One SCRAM server exchange: feed it the client's messages, send back what `step` returns.

    Unsupported extensions are ignored (Kafka). Every failure carries an `e=` server-final message
    (RFC 5802) and a reason for the audit trail; the reason never reaches the client.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        *,
        nonce: Callable[[], str] = default_nonce,
        now_ms: Callable[[], int] | None = None,
        max_session_ms: int | None = None,
        fake_iterations: int = DEFAULT_ITERATIONS,
        unknown: UnknownCredential | None = None,
    ) -> None:
        self.name = mechanism.name
        self._mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce
        self._now_ms = now_ms
        self._max_session_ms = max_session_ms
        self._unknown = unknown or (
            lambda name, _token_auth: fake_credential(
                mechanism, name, key=_PROCESS_FAKE_KEY, shape=FakeCredentialShape(iterations=fake_iterations)
            )
        )
        self._state = 0
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._identity: ScramIdentity | None = None
        self._credential: ScramCredential | None = None
        self._failure: str | None = None

    def __repr__(self) -> str:
        return f"ScramServer({self.name}, state={self._state})"

    def _fail(self, reason: str, error: str = "other-error") -> Failure:
        self._state = 3
        return Failure(reason=reason, data=f"e={error}".encode(), mechanism=self.name, token_id=self._token_id())

    def _token_id(self) -> str | None:
        """The delegation token id a `tokenauth=true` login named (its user name), for the audit trail."""
        first = self._first
        return first.username if first is not None and first.token_auth else None

    def step(self, received: bytes) -> Step:
        if self._state == 0:
            return self._client_first(received)
        if self._state == 1:
            try:
                return self._client_final(received)
            except ScramError as exc:
                return self._fail(str(exc), "invalid-encoding")
        return self._fail("SCRAM exchange already complete")

    def _client_first(self, received: bytes) -> Step:
        try:
            first = parse_client_first(received)
        except ScramError as exc:
            return self._fail(str(exc), "invalid-encoding")
        if first.authzid and first.authzid != first.username:
            self._first = first
            return self._fail(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        identity = self._lookup(first.username, first.token_auth)
        # Derived for every name, found or not, so the first answer takes as long either way.
        fake = self._unknown(first.username, first.token_auth)
        credential: ScramCredential
        if identity is None:
            # Carry on with a fake credential: the client fails at the proof, as with a wrong password.
            self._failure = "Authentication failed: Invalid user credentials"
            credential = fake
        elif identity.credential.iterations < self._mechanism.min_iterations:
            self._first = first
            return self._fail(
                f"Iterations {identity.credential.iterations} is less than the minimum "
                f"{self._mechanism.min_iterations} for {self.name}"
            )
        else:
            credential = identity.credential
        self._first, self._identity, self._credential = first, identity, credential
        nonce = first.nonce + self._nonce()
        self._server_first = (
            f"r={nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        )
        self._state = 1
        return Challenge(self._server_first.encode())

    def _client_final(self, received: bytes) -> Step:
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        m = _CLIENT_FINAL.fullmatch(_text_or_empty(received))
        if m is None:
            return self._fail("Invalid SCRAM client final message format", "invalid-encoding")
        expected_nonce = self._server_first[2 : self._server_first.index(",")]
        if not hmac.compare_digest(m.group("nonce").encode(), expected_nonce.encode()):
            return self._fail("Invalid client nonce in the final client message.")
        if not hmac.compare_digest(_b64decode(m.group("binding")), first.gs2_header.encode()):
            return self._fail("Channel binding does not match the gs2 header", "channel-bindings-dont-match")
        proof = _b64decode(m.group("proof"))
        auth_message = f"{first.bare},{self._server_first},{m.group('without_proof')}".encode()
        mech = self._mechanism
        signature = mech.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            return self._fail(self._failure or "Invalid client credentials", "invalid-proof")
        ok = hmac.compare_digest(mech.hash(_xor(proof, signature)), credential.stored_key)
        if not ok or self._identity is None:
            return self._fail(self._failure or "Invalid client credentials", "invalid-proof")
        identity = self._identity
        lifetime = None
        if self._now_ms is not None:
            lifetime = session_lifetime_ms(self._now_ms(), identity.expiry_ms, self._max_session_ms)
            if lifetime == 0:
                return self._fail("Credential expired", "other-error")
        server_signature = mech.hmac(credential.server_key, auth_message)
        self._state = 2
        return Success(
            principal=identity.principal,
            session_lifetime_ms=lifetime,
            data=b"v=" + base64.b64encode(server_signature),
            token_authenticated=identity.token_authenticated,
            mechanism=self.name,
            token_id=self._token_id(),
        )


def _text_or_empty(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return ""


class SaltedPasswordCache:
    """The salted passwords of ONE client credential (user and password), by mechanism, salt and
    iteration count: a server keeps one salt per user and mechanism, so a few entries suffice; the
    oldest goes first. What it holds logs in as that user to that server, as the password does, so it
    belongs with the password, never shared between credentials."""

    def __init__(self, size: int = 4) -> None:
        self._size = size
        self._entries: dict[tuple[str, bytes, int], bytes] = {}

    def get(self, key: tuple[str, bytes, int]) -> bytes | None:
        return self._entries.get(key)

    def put(self, key: tuple[str, bytes, int], salted: bytes) -> None:
        self._entries.pop(key, None)
        while len(self._entries) >= self._size:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = salted

    def __repr__(self) -> str:
        return f"SaltedPasswordCache({len(self._entries)} entries)"


class ScramClient:
    """The client side (tests, CLI, the gateway's upstream login). Raises `ScramError` on any failure."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        *,
        token_auth: bool = False,
        nonce: str | None = None,
        extensions: Mapping[str, str] | None = None,
        salted_cache: SaltedPasswordCache | None = None,
    ) -> None:
        """`salted_cache`: where the salted password (the PBKDF2 result) for a salt and iteration count
        is kept between logins with this password, so that only the first of many runs PBKDF2 (the
        gateway logs in upstream once per client connection, on its event loop)."""
        self.mechanism = mechanism
        self._salted_cache = salted_cache
        self.username = username
        self._password = password
        self._nonce = nonce or default_nonce()
        self._extensions = dict(extensions or {})
        if token_auth:
            self._extensions[TOKEN_AUTH_EXTENSION] = "true"
        # A `,` in a value (or a bad name) would add attributes of its own to client-first.
        for key, value in self._extensions.items():
            if not re.fullmatch(r"[A-Za-z]+", key) or not re.fullmatch(_VALUE, value):
                raise ScramError(f"Invalid SCRAM extension {key!r}")
        if not re.fullmatch(_PRINTABLE, self._nonce):
            raise ScramError("Invalid SCRAM client nonce")
        self._bare = ""
        self._server_signature = b""

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism.name}, username={self.username!r})"

    def first_message(self) -> bytes:
        ext = "".join(f",{k}={v}" for k, v in self._extensions.items())
        self._bare = f"n={encode_sasl_name(self.username)},r={self._nonce}{ext}"
        return f"n,,{self._bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = _text(server_first)
        m = _SERVER_FIRST.fullmatch(text)
        if m is None:
            raise ScramError("Invalid SCRAM server first message format")
        nonce = m.group("nonce")
        try:
            iterations = int(m.group("iterations"))
        except ValueError:  # over Python's 4300 digits (Kafka: NumberFormatException -> SaslException)
            raise ScramError("Invalid SCRAM server first message format: invalid iterations") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("Invalid server nonce: does not start with client nonce")
        if iterations < self.mechanism.min_iterations:
            raise ScramError(
                f"Requested iterations {iterations} is less than the minimum "
                f"{self.mechanism.min_iterations} for {self.mechanism.name}"
            )
        if iterations > self.mechanism.max_iterations:
            raise ScramError(f"Requested iterations {iterations} is more than the maximum")
        salt = _b64decode(m.group("salt"))
        cache, key = self._salted_cache, (self.mechanism.name, salt, iterations)
        salted = cache.get(key) if cache is not None else None
        if salted is None:
            salted = self.mechanism.salted_password(self._password, salt, iterations)
            if cache is not None:
                cache.put(key, salted)
        mech = self.mechanism
        client_key = mech.hmac(salted, b"Client Key")
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = mech.hmac(mech.hash(client_key), auth_message)
        self._server_signature = mech.hmac(mech.hmac(salted, b"Server Key"), auth_message)
        proof = base64.b64encode(_xor(client_key, signature)).decode()
        return f"{without_proof},p={proof}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        m = _SERVER_FINAL.fullmatch(_text(server_final))
        if m is None:
            raise ScramError("Invalid SCRAM server final message format")
        if m.group("error"):
            raise ScramError(
                f"Sasl authentication using {self.mechanism.name} failed with error: {m.group('error')}"
            )
        if not hmac.compare_digest(_b64decode(m.group("signature")), self._server_signature):
            raise ScramError("Invalid server signature in server final message")
