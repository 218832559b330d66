"""A SCRAM user and an OAuth client of one name are one principal, `User:<name>` (as in Kafka, where
SCRAM's user and OAUTHBEARER's `sub` both become a `User:` KafkaPrincipal). Creating the second of the
two is refused unless asked for, so a service account cannot silently take a person's ACLs."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from authz.database import open_engine
from authz.model import Principal
from kgov.app import build_app
from kgov.settings import Settings
from sasl.service import CredentialError, CredentialService
from tests.support.server import serve_app

pytestmark = pytest.mark.postgres

ADMIN = Principal("User", "admin")
SECRET = "client-secret-0123456789"


@pytest.fixture
def svc(db_url: str) -> Iterator[CredentialService]:
    engine = open_engine(db_url)
    yield CredentialService(engine, Settings(dev_mode=True, sasl={"refresh_interval_s": 0.01,
                                                                  "scram_iterations": 4096}))
    engine.dispose()


def test_a_client_named_like_a_scram_user_is_refused_unless_shared(svc: CredentialService) -> None:
    svc.set_scram_credential("alice", "SCRAM-SHA-512", "alice-password", actor=ADMIN)
    with pytest.raises(CredentialError) as err:
        svc.set_client("alice", SECRET, actor=ADMIN)
    assert err.value.code == CredentialError.DUPLICATE_RESOURCE
    assert "User:alice" in str(err.value) and SECRET not in str(err.value)
    assert svc.store.get_client("alice") is None
    assert svc.set_client("alice", SECRET, actor=ADMIN, shared_principal=True) is False
    # once shared, replacing either credential needs no flag
    assert svc.set_client("alice", SECRET + "x", actor=ADMIN) is True
    assert svc.set_scram_credential("alice", "SCRAM-SHA-256", "alice-password", actor=ADMIN) is False


def test_a_scram_user_named_like_a_client_is_refused_unless_shared(svc: CredentialService) -> None:
    svc.set_client("spark-job", SECRET, actor=ADMIN)
    for create in (
        lambda: svc.set_scram_credential("spark-job", "SCRAM-SHA-512", "pw-123456789", actor=ADMIN),
        # Kafka's AlterUserScramCredentials (through the gateway) has no way to ask for sharing
        lambda: svc.set_scram_salted_credential("spark-job", "SCRAM-SHA-256", salt=b"salt", salted_password=b"k" * 32,
                                                iterations=4096, actor=ADMIN),
    ):
        with pytest.raises(CredentialError) as err:
            create()
        assert err.value.code == CredentialError.DUPLICATE_RESOURCE
    assert svc.describe_scram_users(["spark-job"]) == []
    svc.set_scram_credential("spark-job", "SCRAM-SHA-512", "pw-123456789", actor=ADMIN, shared_principal=True)
    assert [u.name for u in svc.describe_scram_users(["spark-job"])] == ["spark-job"]


def test_other_names_are_untouched(svc: CredentialService) -> None:
    svc.set_scram_credential("bob", "SCRAM-SHA-512", "bob-password", actor=ADMIN)
    assert svc.set_client("bobby", SECRET, actor=ADMIN) is False
    assert svc.set_scram_credential("bobby2", "SCRAM-SHA-512", "pw-123456789", actor=ADMIN) is False


def test_the_rest_api_answers_409_and_takes_shared_principal(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path, admin={"password": "correct-horse-battery"},
                        sasl={"failed_authentication_delay_ms": 0})
    with serve_app(build_app(settings)) as url, \
            httpx.Client(base_url=url, auth=("admin", "correct-horse-battery"), timeout=10) as admin:
        assert admin.put("/v1/scram/users/carol", json={"password": "carol-password"}).status_code == 201
        r = admin.post("/v1/oauth/clients", json={"client_id": "carol", "client_secret": SECRET})
        assert (r.status_code, r.json()["error_code"]) == (409, 40992)
        assert admin.get("/v1/oauth/clients").json() == []
        # the bootstrap super user's name is a SCRAM user too: no client may quietly become it
        r = admin.post("/v1/oauth/clients", json={"client_id": "admin", "client_secret": SECRET})
        assert r.status_code == 409
        r = admin.post("/v1/oauth/clients", json={"client_id": "carol", "client_secret": SECRET,
                                                  "shared_principal": True})
        assert r.status_code == 201
        assert admin.post("/v1/oauth/clients", json={"client_id": "svc", "client_secret": SECRET}).status_code == 201
        assert admin.put("/v1/scram/users/svc", json={"password": "svc-password"}).status_code == 409
        r = admin.put("/v1/scram/users/svc", json={"password": "svc-password", "shared_principal": True})
        assert r.status_code == 201
