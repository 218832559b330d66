"""Credential-service throughput on one core: SCRAM server handshakes, cached PLAIN logins, JWT validations.

    .venv/bin/python bench/sasl_bench.py [--seconds 0.5] [--rounds 8] [--only all|throughput|tokens|bearer|lookup]

Targets (issue 3): >= 20,000 SCRAM handshakes/s and >= 20,000 JWT validations/s on one core.
- SCRAM: the server side of complete SCRAM-SHA-256 and SCRAM-SHA-512 exchanges (client-first ->
  server-first, client-final -> server-final) against stored keys; PBKDF2 happened once at credential
  creation. Only the server's `step` calls are timed; the client's messages are computed outside the
  timer (its proof needs the client key, which a real client derives once per password).
- PLAIN: `CredentialService.verify_password` for a user whose verification is cached (a burst of
  logins with one password), through the real service over SQLite.
- JWT: distinct RS256 (and ES256) tokens from kgov's issuer validated with a cached JWKS.
- Delegation-token logins (`--only tokens`): the server's side of one `tokenauth=true` SCRAM attempt
  (both steps, through `CredentialService.server_mechanism` over SQLite) per mechanism: a login with
  the right HMAC, and the failed attempts an attacker can make (a real id with a wrong HMAC, an unknown
  id, an expired token's id), which must cost the same (the time must not tell whether an id exists).
  The median microseconds per attempt of each round, the best round kept. Also the cost of
  `create_token`, which derives the token's credentials, and of a snapshot reload with 1,000 tokens
  (CPU time: the reload is single-threaded and the machine is shared).
- Delegation tokens over OAUTHBEARER (`--only bearer`): the server's side of one attempt with kgov's
  bearer form (`CredentialService.server_mechanism("OAUTHBEARER")`, the first step, and the client's
  %x01 after an error): the right token, then a real id with a wrong HMAC, an unknown id, an expired
  token's id, which must cost the same.
- Look-ups (`--only lookup`): the first SCRAM answer for a stored user and an unknown name, when the
  look-up checks the database's change version first (`LOOKUP_REFRESH_S` has passed) and when not.
  Hits and misses run the same check, so known and unknown must cost the same either way.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from authz.database import open_engine
from authz.model import Principal
from kgov.settings import Settings
from sasl.delegation import format_bearer
from sasl.issuer import generate_signing_key, jwks, mint_access_token
from sasl.jwt_validation import JwksCache, JwtValidator, ValidationPolicy
from sasl.mechanism import Challenge, Failure, Success
from sasl.oauthbearer import build_client_initial_response
from sasl.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramIdentity,
    ScramMechanism,
    ScramServer,
    derive_credential,
)
from sasl.service import LOOKUP_REFRESH_S, CreatedToken, CredentialService

TARGET = 20_000


def pin_to_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


Runner = Callable[[float], float]  # runs for about `seconds`, returns operations per second


def scram_runner(mech: ScramMechanism) -> Runner:
    password = "bench-password"  # noqa: S105 - a benchmark fixture
    cred = derive_credential(mech, password, iterations=8192)
    salted = mech.salted_password(password, cred.salt, cred.iterations)  # the client's one-time derivation
    client_key = mech.hmac(salted, b"Client Key")
    stored_key = hashlib.new(mech.hash_name, client_key).digest()
    server_key = mech.hmac(salted, b"Server Key")
    identity = ScramIdentity(Principal("User", "bench"), cred)

    def lookup(_name: str, _token: bool) -> ScramIdentity:
        return identity

    def run(seconds: float) -> float:
        server_time = 0.0
        n = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for i in range(100):
                nonce = f"c{n}x{i}"
                server = ScramServer(mech, lookup)
                t0 = time.perf_counter()
                challenge = server.step(f"n,,n=bench,r={nonce}".encode())
                server_time += time.perf_counter() - t0
                assert isinstance(challenge, Challenge)
                server_first = challenge.data.decode()
                without_proof = f"c=biws,r={server_first[2 : server_first.index(',')]}"
                auth = f"n=bench,r={nonce},{server_first},{without_proof}".encode()
                sig = mech.hmac(stored_key, auth)
                proof = (int.from_bytes(client_key, "big") ^ int.from_bytes(sig, "big")).to_bytes(
                    len(sig), "big"
                )
                final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
                t0 = time.perf_counter()
                result = server.step(final)
                server_time += time.perf_counter() - t0
                assert isinstance(result, Success)
                assert hmac.compare_digest(result.data[2:], base64.b64encode(mech.hmac(server_key, auth)))
            n += 100
        return n / server_time

    return run


def _timed(fn: Callable[[], object], seconds: float) -> float:
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            assert fn() is not None
        n += 200
    return n / (time.perf_counter() - start)


def plain_runner(tmp: str) -> Runner:
    engine = open_engine(f"sqlite:///{tmp}/bench.db")
    svc = CredentialService(engine, Settings(dev_mode=True), clock=lambda: datetime.now(UTC))
    svc.set_scram_credential("bench", "SCRAM-SHA-512", "bench-password", actor="bench")
    assert svc.verify_password("bench", "bench-password") is not None  # fills the cache
    return lambda seconds: _timed(lambda: svc.verify_password("bench", "bench-password"), seconds)


def jwt_runner(alg: str, *, distinct: bool = True) -> Runner:
    """Distinct tokens (every one a signature check), or one worker's token presented again and again."""
    key = generate_signing_key(alg, 0)
    cache = JwksCache(lambda: jwks([key]))
    policy = ValidationPolicy(issuer="kgov", audience="kgov")
    validator = JwtValidator(cache, policy, cache_size=0 if distinct else 10_000)
    now = int(time.time())
    tokens = [
        mint_access_token(
            key,
            issuer="kgov",
            audience="kgov",
            subject=f"worker-{i}",
            scopes=["kafka"],
            now_s=now,
            lifetime_s=3600,
        ).access_token
        for i in range(1000 if distinct else 1)
    ]
    validator.validate(tokens[0])  # loads the JWKS once
    position = [0]

    def next_token() -> object:
        position[0] = (position[0] + 1) % len(tokens)
        return validator.validate(tokens[position[0]])

    return lambda seconds: _timed(next_token, seconds)


def raw_rsa_runner() -> Runner:
    """Calibration: OpenSSL RSA-2048 PKCS#1 v1.5 verifications/s through `cryptography` alone, the floor
    under any RS256 validator on this machine at this moment (the box is shared)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    message = b"x" * 400
    signature = private.sign(message, padding.PKCS1v15(), hashes.SHA256())
    public = private.public_key()

    def verify() -> bool:
        public.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
        return True

    return lambda seconds: _timed(verify, seconds)


class _Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


# A login with the right HMAC, then what an attacker without it can try: a real id with a wrong
# proof, an id that does not exist, an expired token's id. The last three must cost the same.
TOKEN_KINDS = ("real token", "real id, wrong HMAC", "unknown id", "expired id")


def _median_runner(attempt: Callable[[int], float]) -> Runner:
    """A runner calling `attempt(n)` (n = 1, 2, ...: its seconds of server time) for the given seconds,
    at least 5 times; its result is the median, in microseconds."""
    counter = [0]

    def run(seconds: float) -> float:
        times: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(times) < 5:
            counter[0] += 1
            times.append(attempt(counter[0]))
        return statistics.median(times) * 1e6

    return run


def _token_service(db_file: str) -> tuple[CredentialService, CreatedToken, CreatedToken]:
    """A credential service over its own SQLite file with 100 tokens, then a live one and one that has
    expired (its clock moved past it): (service, live token, expired token)."""
    clock = _Clock()
    settings = Settings(
        dev_mode=True,
        sasl={"delegation_token_secret_key": "bench-delegation-token-secret", "max_failed_attempts_per_source": 10**9,
              "max_failed_attempts_per_address": 10**9},
    )
    svc = CredentialService(open_engine(f"sqlite:///{db_file}"), settings, clock=clock)
    owner = Principal("User", "bench")
    for _ in range(100):  # a few other tokens in the snapshot
        svc.create_token(owner)
    real = svc.create_token(owner)
    stale = svc.create_token(owner, max_lifetime_ms=1)
    clock.now += timedelta(milliseconds=2)
    return svc, real, stale


def token_login_runner(tmp: str, mech: ScramMechanism, kind: str) -> Runner:
    """Returns a runner whose result is the median server time of one attempt, in microseconds."""
    svc, real, stale = _token_service(f"{tmp}/tokens-{mech.name}-{kind[:4]}.db")
    name = {"unknown id": None, "expired id": stale.info.token_id}.get(kind, real.info.token_id)
    password = base64.b64encode(real.hmac).decode()
    client_key: bytes | None = None  # the real client's, derived once from the salt the server shows

    def attempt(i: int) -> float:
        nonlocal client_key
        user = name or f"{uuid.UUID(int=i)}"  # unknown: a new id every time
        nonce = f"t{i}"
        server = svc.server_mechanism(mech.name, "10.0.0.1")
        bare = f"n={user},r={nonce},tokenauth=true"
        first_message = f"n,,{bare}".encode()
        t0 = time.perf_counter()
        challenge = server.step(first_message)
        elapsed = time.perf_counter() - t0
        assert isinstance(challenge, Challenge)
        server_first = challenge.data.decode()
        fields = dict(item.split("=", 1) for item in server_first.split(","))
        without_proof = f"c=biws,r={fields['r']}"
        auth = f"{bare},{server_first},{without_proof}".encode()
        if kind == "real token":
            if client_key is None:
                salted = mech.salted_password(password, base64.b64decode(fields["s"]), int(fields["i"]))
                client_key = mech.hmac(salted, b"Client Key")
            proof = _xor(client_key, mech.hmac(hashlib.new(mech.hash_name, client_key).digest(), auth))
        else:
            proof = os.urandom(mech.digest_size)
        final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        t0 = time.perf_counter()
        result = server.step(final)
        elapsed += time.perf_counter() - t0
        assert isinstance(result, Success) == (kind == "real token"), result
        return elapsed

    return _median_runner(attempt)


def bearer_login_runner(tmp: str, kind: str) -> Runner:
    """The median server time of one OAUTHBEARER attempt with a delegation token's bearer, in µs."""
    svc, real, stale = _token_service(f"{tmp}/bearer-{kind[:4]}.db")
    wrong = os.urandom(64)

    def message(i: int) -> bytes:
        if kind == "real token":
            return build_client_initial_response(format_bearer(real.info.token_id, real.hmac))
        if kind == "expired id":
            return build_client_initial_response(format_bearer(stale.info.token_id, stale.hmac))
        token_id = real.info.token_id if kind == "real id, wrong HMAC" else f"{uuid.UUID(int=i)}"
        return build_client_initial_response(format_bearer(token_id, wrong))

    def attempt(i: int) -> float:
        first = message(i)
        server = svc.server_mechanism("OAUTHBEARER", "10.0.0.1")
        t0 = time.perf_counter()
        result = server.step(first)
        if isinstance(result, Challenge):
            result = server.step(b"\x01")
        elapsed = time.perf_counter() - t0
        assert isinstance(result, Success if kind == "real token" else Failure), result
        return elapsed

    return _median_runner(attempt)


def _best_medians(rows: list[tuple[str, Runner]], args: argparse.Namespace) -> list[float]:
    """Each runner's lowest median over the rounds, the rounds interleaved."""
    best = [float("inf")] * len(rows)
    for _ in range(args.rounds):
        for i, (_name, runner) in enumerate(rows):
            best[i] = min(best[i], runner(args.seconds))
    return best


def bearer_logins(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = [(f"OAUTHBEARER delegation token, {kind}", bearer_login_runner(tmp, kind)) for kind in TOKEN_KINDS]
        best = _best_medians(rows, args)
    for (name, _runner), micros in zip(rows, best, strict=True):
        print(f"{name:<56} {micros:>8,.1f} us/attempt (server, median)")
    ratios = ", ".join(f"{TOKEN_KINDS[k]} {best[k] / best[1]:.2f}" for k in (2, 3))
    print(f"OAUTHBEARER, failed attempts against a real id's: {ratios}")


def create_token_runner(tmp: str) -> Runner:
    """Median milliseconds of one `create_token` (its credentials derived, stored, snapshot reloaded)."""
    engine = open_engine(f"sqlite:///{tmp}/tokens-create.db")
    settings = Settings(dev_mode=True, sasl={"delegation_token_secret_key": "bench-delegation-token-secret"})
    svc = CredentialService(engine, settings)
    owner = Principal("User", "bench")

    def run(seconds: float) -> float:
        times: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(times) < 3:
            t0 = time.perf_counter()
            svc.create_token(owner)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    return run


def reload_runner(tmp: str, tokens: int = 1000) -> Runner:
    """Median CPU milliseconds of one snapshot reload (`refresh`) with `tokens` delegation tokens."""
    engine = open_engine(f"sqlite:///{tmp}/tokens-reload.db")
    settings = Settings(dev_mode=True, sasl={"delegation_token_secret_key": "bench-delegation-token-secret"})
    svc = CredentialService(engine, settings)
    for _ in range(tokens):
        svc.create_token(Principal("User", "bench"))

    def run(seconds: float) -> float:
        times: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(times) < 3:
            t0 = time.process_time()
            svc.refresh()
            times.append(time.process_time() - t0)
        return statistics.median(times) * 1e3

    return run


LOOKUP_KINDS = ("known user, checked", "unknown name, checked", "known user, not checked", "unknown name, not checked")


def lookup_runner(tmp: str, kind: str) -> Runner:
    """The server's answer to a SCRAM-SHA-512 client-first message (sent at once, before any failure
    delay: its time is what a prober sees) through `CredentialService.server_mechanism` over SQLite with
    200 users. "checked": the node's clock has moved past `LOOKUP_REFRESH_S` before each attempt, so the
    look-up asks the database for its change version first; "not checked": it has not."""
    mono = [1000.0]
    settings = Settings(dev_mode=True, sasl={"max_failed_attempts_per_source": 10**9,
                                             "max_failed_attempts_per_address": 10**9, "scram_iterations": 4096})
    svc = CredentialService(open_engine(f"sqlite:///{tmp}/lookup-{kind[:5]}-{kind[-7:]}.db"), settings,
                            monotonic=lambda: mono[0])
    for i in range(200):
        svc.set_scram_credential(f"user-{i}", "SCRAM-SHA-512", "pw", actor="bench")
    checked = kind.endswith(", checked")
    known = kind.startswith("known")

    def attempt(i: int) -> float:
        if checked:
            mono[0] += LOOKUP_REFRESH_S + 0.001
        name = f"user-{i % 200}" if known else f"nobody-{i}"
        server = svc.server_mechanism("SCRAM-SHA-512", "10.0.0.1")
        message = f"n,,n={name},r=bench-nonce-{i}".encode()
        t0 = time.perf_counter()
        first = server.step(message)
        elapsed = time.perf_counter() - t0
        assert isinstance(first, Challenge)
        return elapsed

    return _median_runner(attempt)


def lookup_timing(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = [(kind, lookup_runner(tmp, kind)) for kind in LOOKUP_KINDS]
        best = _best_medians(rows, args)
    for (name, _runner), micros in zip(rows, best, strict=True):
        print(f"SCRAM-SHA-512 first message, {name:<26} {micros:>10,.1f} us (server, median)")
    print(f"unknown / known, checked: {best[1] / best[0]:.2f}; not checked: {best[3] / best[2]:.2f}")
    print(f"a look-again on misses only would have added {best[1] - best[3]:,.1f} us to unknown names alone")


def token_logins(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            (f"tokenauth {mech.name} {kind}", token_login_runner(tmp, mech, kind))
            for mech in (SCRAM_SHA_256, SCRAM_SHA_512)
            for kind in TOKEN_KINDS
        ]
        create, reload = create_token_runner(tmp), reload_runner(tmp)
        best = [float("inf")] * len(rows)
        best_create = best_reload = float("inf")
        for _ in range(args.rounds):
            for i, (_name, runner) in enumerate(rows):
                best[i] = min(best[i], runner(args.seconds))
            best_create = min(best_create, create(args.seconds))
            best_reload = min(best_reload, reload(args.seconds))
    for (name, _runner), micros in zip(rows, best, strict=True):
        print(f"{name:<44} {micros:>10,.1f} us/attempt (server, median)")
    for start in (0, len(TOKEN_KINDS)):
        wrong = best[start + 1]
        ratios = ", ".join(f"{TOKEN_KINDS[k]} {best[start + k] / wrong:.2f}" for k in (2, 3))
        print(f"{rows[start][0].split()[1]}, failed attempts against a real id's: {ratios}")
    print(f"{'create_token (both credentials derived)':<44} {best_create:>10,.2f} ms (median)")
    print(f"{'snapshot reload, 1,000 tokens':<44} {best_reload:>10,.2f} ms CPU (median)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one round of one measurement")
    parser.add_argument("--rounds", type=int, default=8, help="rounds, interleaved; the best of each is kept")
    parser.add_argument("--only", choices=("all", "throughput", "tokens", "bearer", "lookup"), default="all",
                        help="throughput: the rows with targets; tokens: delegation-token login costs (SCRAM); "
                             "bearer: delegation-token login costs (OAUTHBEARER); lookup: a known and an unknown "
                             "name's first SCRAM answer, with and without the look-up's check of the database")
    args = parser.parse_args()
    pin_to_one_core()
    if args.only in ("all", "throughput"):
        throughput(args)
    if args.only in ("all", "tokens"):
        token_logins(args)
    if args.only in ("all", "bearer"):
        bearer_logins(args)
    if args.only in ("all", "lookup"):
        lookup_timing(args)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores shared with other work)")
    return 0


def throughput(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows: list[tuple[str, Runner, int | None]] = [
            ("SCRAM-SHA-256 server handshakes/s", scram_runner(SCRAM_SHA_256), TARGET),
            ("SCRAM-SHA-512 server handshakes/s", scram_runner(SCRAM_SHA_512), TARGET),
            ("PLAIN logins/s (cached derivation)", plain_runner(tmp), None),
            ("JWT RS256 validations/s (cached JWKS)", jwt_runner("RS256"), TARGET),
            ("JWT ES256 validations/s (cached JWKS)", jwt_runner("ES256"), None),
            ("JWT RS256 repeated token/s (verified cache)", jwt_runner("RS256", distinct=False), None),
            ("calibration: raw RSA-2048 verify/s", raw_rsa_runner(), None),
        ]
        best = [0.0] * len(rows)
        for _ in range(args.rounds):
            for i, (_name, runner, _target) in enumerate(rows):
                best[i] = max(best[i], runner(args.seconds))
    ok = True
    for (name, _runner, target), rate in zip(rows, best, strict=True):
        ratio = f"  {rate / target:.2f}x target {target:,}" if target else ""
        print(f"{name:<44} {rate:>10,.0f}{ratio}")
        ok = ok and (target is None or rate >= target)
    jwt_rate, raw = best[3], best[6]
    print(f"JWT RS256 validation / raw RSA verify: {jwt_rate / raw:.2f}")
    print("targets met" if ok else "BELOW TARGET")


if __name__ == "__main__":
    raise SystemExit(main())
