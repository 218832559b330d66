"""`kgov up`'s /health also answers for its embedded gateway, whose ACL and credential snapshots are its
own: when the database stops answering, the gateway fails closed and the node must leave the load
balancer even though the control plane's own snapshots may still be young."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.runtime import build_runtime
from kgov.settings import Settings
from kgov.up import _gateway_snapshot_problem
from tests.support.data_dir_outage import data_dir_gone
from tests.support.waiting import wait_for


@pytest.mark.parametrize(("sections", "named"), [
    ({"sasl": {"max_snapshot_age_s": 1.0, "refresh_interval_s": 0.05}}, "sasl.max_snapshot_age_s"),
    ({"authz": {"max_snapshot_age_s": 1.0, "refresh_interval_s": 0.05}}, "authz.max_snapshot_age_s"),
])
def test_a_gateway_snapshot_too_old_to_decide_with_is_a_health_problem(
    tmp_path: Path, sections: dict[str, Any], named: str,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    settings = Settings(db=f"sqlite:///{data / 'kgov.db'}", data_dir=data,
                        gateway={"security_protocol": "SASL_PLAINTEXT"}, **sections)
    runtime = build_runtime(settings, listen="127.0.0.1:0", upstream="127.0.0.1:9")
    try:
        assert _gateway_snapshot_problem(runtime) is None
        with data_dir_gone(runtime.engine, data):
            assert wait_for(lambda: named in (_gateway_snapshot_problem(runtime) or ""))
            assert (_gateway_snapshot_problem(runtime) or "").startswith("gateway: ")
        assert wait_for(lambda: _gateway_snapshot_problem(runtime) is None)
    finally:
        asyncio.run(runtime.stop())
