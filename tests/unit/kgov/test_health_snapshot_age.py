"""/health and /metrics report a stale ACL snapshot (authz.max_snapshot_age_s), through the assembled app."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from kgov.app import build_app
from kgov.settings import load_settings
from tests.support.data_dir_outage import data_dir_gone
from tests.support.waiting import wait_for


def test_a_node_cut_off_from_its_database_reports_itself_down(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # Public metrics: a scrape with credentials needs the credential store, which is in the database
    # this test takes away (/health, open, says the node is down either way).
    # Polled every 0.05 s against a bound of 1.5 s: a loaded machine's pause does not make the connected
    # node look down.
    settings = load_settings(data_dir=data, dev_mode=True,
                             authz={"max_snapshot_age_s": 1.5, "refresh_interval_s": 0.05},
                             metrics={"public": True})
    with TestClient(build_app(settings)) as client:
        assert client.get("/health").json() == {"status": "UP"}
        assert "kgov_authz_snapshot_stale 0.0" in client.get("/metrics").text
        with data_dir_gone(client.app.state.engine, data):  # type: ignore[attr-defined]
            assert wait_for(lambda: client.get("/health").status_code == 503)
            down = client.get("/health").json()
            assert down["error_code"] == 503 and "max_snapshot_age_s" in down["message"]
            assert "kgov_authz_snapshot_stale 1.0" in client.get("/metrics").text
        assert wait_for(lambda: client.get("/health").status_code == 200)
        assert "kgov_authz_snapshot_stale 0.0" in client.get("/metrics").text
