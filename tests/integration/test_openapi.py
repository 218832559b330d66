"""openapi.yaml is the REST contract: it must equal what the served app describes."""

from __future__ import annotations

from pathlib import Path

import yaml

from scripts.write_openapi import current_openapi

ROOT = Path(__file__).resolve().parents[2]


def test_openapi_yaml_matches_the_served_app() -> None:
    committed = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    served = current_openapi()
    missing = sorted(set(served["paths"]) - set(committed["paths"]))  # type: ignore[arg-type]
    extra = sorted(set(committed["paths"]) - set(served["paths"]))  # type: ignore[arg-type]
    assert not missing and not extra, f"run `make openapi`: served-only {missing}, file-only {extra}"
    assert committed == served, "openapi.yaml drifted from the served app: run `make openapi` and review the diff"


def test_every_route_is_documented() -> None:
    served = current_openapi()
    for path in ("/v3/clusters/{cluster_id}/acls", "/v1/data/kafka/authz/allow", "/security/1.0/roles",
                 "/health", "/metrics"):
        assert path in served["paths"]  # type: ignore[operator]
