"""Settings the gateway refuses at start, before it opens anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import refuse_weak_admin_password_beyond_loopback
from gateway.runtime import build_runtime
from kgov.settings import Settings


def test_a_mechanism_the_credential_service_does_not_enable_is_refused_at_start(tmp_path: Path) -> None:
    settings = Settings(db=f"sqlite:///{tmp_path / 'kgov.db'}", data_dir=tmp_path,
                        sasl={"enabled_mechanisms": ["SCRAM-SHA-512"]},
                        gateway={"mechanisms": ["scram-sha-512", "PLAIN"]})
    with pytest.raises(ValueError, match=r"gateway.mechanisms names PLAIN, which \[sasl\] enabled_mechanisms "
                                         r"\(SCRAM-SHA-512\) does not enable"):
        build_runtime(settings, listen="127.0.0.1:0", upstream="127.0.0.1:9")
    assert not (tmp_path / "kgov.db").exists() and not (tmp_path / "audit").exists()  # nothing opened


def test_the_weak_password_check_names_the_first_listener_beyond_loopback() -> None:
    # The one check behind kgov up, kgov serve and the gateway.
    refuse_weak_admin_password_beyond_loopback(True, ["127.0.0.1", "::1", "localhost"])
    refuse_weak_admin_password_beyond_loopback(False, ["0.0.0.0", "10.0.0.1"])  # a strong password goes anywhere
    with pytest.raises(ValueError, match=r"refusing a weak admin password on '10\.0\.0\.1' in dev mode") as err:
        refuse_weak_admin_password_beyond_loopback(True, ["127.0.0.1", "10.0.0.1", "0.0.0.0"])
    assert "KGOV_ADMIN__PASSWORD to at least 12 characters" in str(err.value)
    with pytest.raises(ValueError, match=r"on 'kafka\.example' in dev mode"):  # a name is not known to be local
        refuse_weak_admin_password_beyond_loopback(True, ["kafka.example"])


def test_dev_mode_with_a_weak_admin_password_is_refused_beyond_loopback(tmp_path: Path) -> None:
    settings = Settings(db=f"sqlite:///{tmp_path / 'kgov.db'}", data_dir=tmp_path, dev_mode=True,
                        admin={"password": "admin"})
    with pytest.raises(ValueError, match=r"refusing a weak admin password on '0\.0\.0\.0' in dev mode"):
        build_runtime(settings, listen="0.0.0.0:0", upstream="127.0.0.1:9")
    assert not (tmp_path / "kgov.db").exists()


def test_a_malformed_address_names_the_setting_or_option_it_came_from(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, gateway={"listen": "nonsense", "upstream": "kafka:9092x"})
    with pytest.raises(ValueError, match=r"^gateway\.listen \(KGOV_GATEWAY__LISTEN\) must be HOST:PORT, got 'nonsense'"):
        build_runtime(settings)
    with pytest.raises(ValueError, match=r"^--listen must be HOST:PORT, got 'also-nonsense'"):
        build_runtime(settings, listen="also-nonsense")
    with pytest.raises(ValueError, match=r"^gateway\.upstream \(KGOV_GATEWAY__UPSTREAM\) must be HOST:PORT"):
        build_runtime(settings, listen="127.0.0.1:0")
