"""`kgov audit run` options: times, zones, business hours, heap size (pure; no Spark started)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest

from spark_compliance import reports as R
from spark_compliance.job import add_run_arguments, options_from_args
from spark_compliance.session import driver_memory


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_run_arguments(p)
    return p.parse_args(list(argv))


def test_defaults_and_explicit_values() -> None:
    o = options_from_args(_parse("--input", "a", "b", "--input", "c", "--out", "o"))
    assert (list(o.inputs), o.out, o.master, o.default_zone, o.source_zones, o.exclude_principals) == (
        ["a", "b", "c"], "o", "local[*]", "UTC", {}, ("User:kafka",))
    o = options_from_args(_parse(
        "--input", "a", "--out", "o", "--master", "spark://h:7077", "--since", "2024-04-02T00:00:00",
        "--until", "2024-04-03T00:00:00+02:00", "--log-timezone", "Europe/Paris", "--log-timezone",
        "broker-3=America/New_York", "--business-hours", "9-17", "--business-timezone", "Europe/Berlin",
        "--exclude-principal", "User:broker", "--dormant-days", "90", "--gap-minutes", "15"))
    assert o.master == "spark://h:7077"
    assert o.since == datetime(2024, 4, 2, tzinfo=UTC)
    assert o.until is not None and o.until.astimezone(UTC) == datetime(2024, 4, 2, 22, tzinfo=UTC)
    assert (o.default_zone, o.source_zones) == ("Europe/Paris", {"broker-3": "America/New_York"})
    assert (o.params.business_start_hour, o.params.business_end_hour, o.params.business_zone) == (
        9, 17, "Europe/Berlin")
    assert (o.exclude_principals, o.params.dormant_days, o.params.gap_minutes) == (("User:broker",), 90, 15)


@pytest.mark.parametrize("hours", ["18-8", "x-y", "9", "0-25"])
def test_business_hours_are_validated(hours: str) -> None:
    with pytest.raises(SystemExit, match="--business-hours"):
        options_from_args(_parse("--input", "a", "--out", "o", "--business-hours", hours))


def test_driver_memory_default_override_and_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KGOV_AUDIT_DRIVER_MEMORY", raising=False)
    default = driver_memory()
    assert default.endswith("g") and 1 <= int(default[:-1]) <= 8
    monkeypatch.setenv("KGOV_AUDIT_DRIVER_MEMORY", "12g")
    assert driver_memory() == "12g"
    for bad in ("lots", "0g", "-4g", "4 g"):
        monkeypatch.setenv("KGOV_AUDIT_DRIVER_MEMORY", bad)
        with pytest.raises(ValueError, match="KGOV_AUDIT_DRIVER_MEMORY"):
            driver_memory()


def test_every_threshold_can_be_set_from_the_command_line() -> None:
    o = options_from_args(_parse("--input", "a", "--out", "o", "--param", "brute-force-threshold=50",
                                 "--param", "volume_factor=2.5", "--param", "off-hours-max-share=0.25",
                                 "--min-client-version", "librdkafka=2.3.0", "--min-client-version", "franz-go=1.15"))
    assert (o.params.brute_force_threshold, o.params.volume_factor, o.params.off_hours_max_share) == (50, 2.5, 0.25)
    assert o.params.min_client_versions["librdkafka"] == "2.3.0"
    assert o.params.min_client_versions["franz-go"] == "1.15"
    assert o.params.min_client_versions["kafka-python"] == "2.0.2"  # defaults kept
    assert options_from_args(_parse("--input", "a", "--out", "o")).params == R.Params()


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--param", "no-such-threshold=3", "expected NAME=VALUE"),
    ("--param", "brute-force-threshold", "expected NAME=VALUE"),
    ("--param", "brute-force-threshold=many", "not an integer"),
    ("--param", "volume-factor=fast", "not a number"),
    ("--param", "volume-factor=nan", "out of range"),
    ("--param", "denied-spike-min=-1", "out of range"),
    ("--param", "off-hours-max-share=1.5", "out of range"),
    ("--param", "brute-force-window-minutes=0", "out of range"),
    ("--min-client-version", "librdkafka", "SOFTWARE=VERSION"),
    ("--min-client-version", "librdkafka=latest", "SOFTWARE=VERSION"),
])
def test_malformed_thresholds_are_refused_with_the_flag_named(flag: str, value: str, message: str) -> None:
    with pytest.raises(SystemExit, match=message) as e:
        options_from_args(_parse("--input", "a", "--out", "o", flag, value))
    assert flag in str(e.value)


def test_every_report_parameter_has_exactly_one_way_to_be_set() -> None:
    """A `Params` field has its own flag (`_FLAGGED`) or a `--param` name, never neither or both."""
    from dataclasses import fields

    from spark_compliance.job import _FLAGGED, _TUNABLE
    by_param = {name.replace("-", "_") for name in _TUNABLE}
    assert not by_param & set(_FLAGGED)
    not_numeric = {"gap_streams", "min_client_versions"}  # a tuple (fixed) and `--min-client-version`
    assert {f.name for f in fields(R.Params)} == by_param | set(_FLAGGED) | not_numeric
    o = options_from_args(_parse("--input", "a", "--out", "o", "--business-hours", "9-17", "--business-timezone",
                                 "Europe/Berlin", "--dormant-days", "90", "--baseline-days", "3.5",
                                 "--gap-minutes", "15"))
    assert [f for f in _FLAGGED if getattr(o.params, f) == getattr(R.Params(), f)] == []


def test_a_missing_local_input_is_refused_before_spark_starts(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from kgov.cli import main
    from spark_compliance import job
    from spark_compliance.cli import missing_local_paths

    def no_spark(_opts: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(job, "run", no_spark)
    (tmp_path / "logs").mkdir()
    code = main(["audit", "run", "--input", str(tmp_path / "logs"), str(tmp_path / "nope"),
                 "--classification", str(tmp_path / "c.json"), "--out", str(tmp_path / "out")])
    assert code == 2
    assert capsys.readouterr().err == (f"kgov audit run: no such file or directory: {tmp_path / 'nope'}, "
                                       f"{tmp_path / 'c.json'}\n")
    parsed = _parse("--input", str(tmp_path / "logs"), f"file://{tmp_path}/logs", f"file:{tmp_path}/gone",
                    "hdfs://nn/logs", str(tmp_path / "*" / "server.log"), "--out", "o")
    assert missing_local_paths(parsed) == [f"file:{tmp_path}/gone"]


def test_paths_with_a_scheme_but_no_authority_are_left_to_spark() -> None:
    # Hadoop reads `hdfs:/logs` (the default namenode) and `s3a:/...` as paths of those file systems,
    # not as local relative paths named "hdfs:": refusing them would refuse a run Spark can do.
    from spark_compliance.cli import missing_local_paths

    parsed = _parse("--input", "hdfs:/logs/2024", "viewfs:/cluster/logs", "gs://bucket/logs", "--out", "o")
    assert missing_local_paths(parsed) == []
    assert missing_local_paths(_parse("--input", "no-such-dir/a:b", "--out", "o")) == ["no-such-dir/a:b"]
