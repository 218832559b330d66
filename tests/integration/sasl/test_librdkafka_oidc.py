"""librdkafka's built-in OIDC client (`sasl.oauthbearer.method=oidc`) against kgov's token endpoint on a
real uvicorn server: the token it fetches is one our validator accepts (the gateway issue carries it on
to a broker connection)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kgov.app import build_app
from kgov.settings import Settings
from sasl.oauthbearer import TokenValidationError
from tests.support.server import serve_app

ADMIN_PW = "admin-password-for-oidc"


class TokenResponses:
    """ASGI wrapper recording what /oauth/token answered (status and body) to librdkafka."""

    def __init__(self, app) -> None:
        self.app = app
        self.answers: list[tuple[int, bytes]] = []
        self.requests: list[dict[str, str]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/oauth/token":
            return await self.app(scope, receive, send)
        self.requests.append({k.decode(): v.decode() for k, v in scope["headers"]})
        status = [0]
        body = bytearray()

        async def capture(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body":
                body.extend(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, capture)
        self.answers.append((status[0], bytes(body)))


def test_librdkafka_fetches_a_valid_token(tmp_path: Path, refused_port: int) -> None:
    settings = Settings(data_dir=tmp_path, admin={"password": ADMIN_PW})
    app = build_app(settings)
    recorder = TokenResponses(app)
    with serve_app(recorder) as url:
        app.state.credentials.set_client(
            "rdkafka-worker", "rdkafka-secret-0123456789", ["kafka"], actor="test"
        )
        errors: list[str] = []
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{refused_port}",  # nothing listens: only the token fetch matters
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": "rdkafka-worker",
                "sasl.oauthbearer.client.secret": "rdkafka-secret-0123456789",
                "sasl.oauthbearer.token.endpoint.url": f"{url}/oauth/token",
                "sasl.oauthbearer.scope": "kafka",
                "error_cb": lambda err: errors.append(str(err)),
                "log_level": 0,
            }
        )
        deadline = time.monotonic() + 20
        while not recorder.answers and time.monotonic() < deadline:
            producer.poll(0.1)
        producer.poll(0.5)
        assert recorder.answers, "librdkafka never called the token endpoint"
        status, body = recorder.answers[0]
        assert status == 200, body
        assert recorder.requests[0]["authorization"].startswith("Basic ")
        token = json.loads(body)["access_token"]
        validated = app.state.credentials.validator.validate(token)
        assert validated.principal_name == "rdkafka-worker" and validated.scopes == {"kafka"}
        assert not [e for e in errors if "OAUTHBEARER" in e or "token" in e.lower()], errors
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        assert claims["sub"] == "rdkafka-worker"
        producer.flush(0)


def test_external_identity_provider_by_jwks_url(tmp_path: Path) -> None:
    """A second deployment validates tokens of the first one, fetching its JWKS over real HTTP."""
    issuer_app = build_app(Settings(data_dir=tmp_path / "idp", admin={"password": ADMIN_PW}))
    with serve_app(issuer_app) as idp:
        issuer_app.state.credentials.set_client("ext-worker", "ext-secret-0123456789xx", [], actor="test")
        account = issuer_app.state.credentials.authenticate_client("ext-worker", "ext-secret-0123456789xx")
        token = issuer_app.state.credentials.issue_token(account, None).access_token
        consumer_app = build_app(
            Settings(
                data_dir=tmp_path / "rp",
                admin={"password": ADMIN_PW},
                oauth={"jwks_url": f"{idp}/.well-known/jwks.json", "issuer": "kgov", "audience": "kgov"},
            )
        )
        validator = consumer_app.state.credentials.validator
        assert validator.validate(token).principal_name == "ext-worker"
        assert consumer_app.state.credentials.jwks.refresh_count == 1
        # The provider has an application named like kgov's admin user (a super user here): refused.
        # (shared_principal: the issuer's own admin is a SCRAM user, and this test makes the clash on purpose)
        issuer_app.state.credentials.set_client("admin", "admin-app-secret-0123456789", [], actor="test",
                                                shared_principal=True)
        named_admin = issuer_app.state.credentials.issue_token(
            issuer_app.state.credentials.authenticate_client("admin", "admin-app-secret-0123456789"), None)
        with pytest.raises(TokenValidationError, match="names kgov's admin user"):
            validator.validate(named_admin.access_token)
        # ... and the issuer's own deployment, where "admin" is its own service account, accepts it.
        assert issuer_app.state.credentials.validator.validate(named_admin.access_token).principal_name == "admin"
        # The issuer revokes the tokens of a client it deleted; a deployment that only trusts its JWKS cannot
        # know, and goes on accepting them until `exp`, as Kafka does (its clients are not ext-worker's, and
        # the `iss` is its own default `token_issuer`: only its own issuer's tokens are checked so).
        issuer_app.state.credentials.delete_client("ext-worker", actor="test")
        with pytest.raises(TokenValidationError, match="OAuth client ext-worker was deleted"):
            issuer_app.state.credentials.validator.validate(token)
        assert validator.validate(token).principal_name == "ext-worker"
        consumer_app.state.engine.dispose()
