"""/health, /metrics and the login routes when the credential snapshot is older than
sasl.max_snapshot_age_s (the database went away), through the assembled app."""

from __future__ import annotations

import base64
from pathlib import Path

from fastapi.testclient import TestClient

from kgov.app import build_app
from kgov.settings import load_settings
from tests.support.data_dir_outage import data_dir_gone
from tests.support.waiting import wait_for

ADMIN_PW = "admin-password-for-tests"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_logins_fail_closed_once_the_credential_snapshot_is_too_old(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # The ACL snapshot may age without limit (authz's default): only the credentials' bound is at work.
    settings = load_settings(data_dir=data, dev_mode=True, admin={"password": ADMIN_PW},
                             sasl={"max_snapshot_age_s": 1.0, "refresh_interval_s": 0.05},
                             metrics={"public": True})
    token_request = {"grant_type": "client_credentials"}
    with TestClient(build_app(settings)) as client:
        admin = basic("admin", ADMIN_PW)
        assert client.get("/v1/scram/users", headers=admin).status_code == 200
        r = client.post("/v1/oauth/clients", headers=admin,
                        json={"client_id": "job", "client_secret": "job-secret-0123456789", "scopes": []})
        assert r.status_code in (200, 201)
        assert client.post("/oauth/token", data=token_request,
                           headers=basic("job", "job-secret-0123456789")).status_code == 200
        assert client.get("/health").json() == {"status": "UP"}
        assert "kgov_sasl_snapshot_stale 0.0" in client.get("/metrics").text

        with data_dir_gone(client.app.state.engine, data):  # type: ignore[attr-defined]
            assert wait_for(lambda: client.get("/health").status_code == 503)
            assert "sasl.max_snapshot_age_s" in client.get("/health").json()["message"]
            assert "kgov_sasl_snapshot_stale 1.0" in client.get("/metrics").text
            assert client.get("/v1/scram/users", headers=admin).status_code == 401
            r = client.post("/oauth/token", data=token_request, headers=basic("job", "job-secret-0123456789"))
            assert (r.status_code, r.json()["error"]) == (503, "temporarily_unavailable")
        assert wait_for(lambda: client.get("/health").status_code == 200)  # the probe's check brings it back
        assert client.get("/v1/scram/users", headers=admin).status_code == 200
        assert "kgov_sasl_snapshot_stale 0.0" in client.get("/metrics").text
