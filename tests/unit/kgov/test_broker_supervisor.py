"""kgov.broker_supervisor: the restart policy, the wording of an exit, and the supervisor's loop over
brokers that are real child processes (stand-ins for Tansu; the real one: tests/integration/kgov)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kgov.app import build_app
from kgov.broker_sandbox import stop_process
from kgov.broker_supervisor import BrokerSupervisor, GiveUp, Restart, RestartPolicy, describe_exit
from kgov.settings import load_settings
from tests.support.waiting import wait_for

POLICY = RestartPolicy(first_delay_s=0.5, max_delay_s=3.0, quick_s=30.0, give_up_after=5)


def test_quick_failures_in_a_row_double_the_delay_up_to_the_cap_then_give_up() -> None:
    decisions = []
    streak = 0
    for _ in range(5):
        decision = POLICY.after_exit(streak, ran_s=1.0)
        decisions.append(decision)
        if isinstance(decision, Restart):
            streak = decision.quick_failures
    assert decisions == [Restart(0.5, 1), Restart(1.0, 2), Restart(2.0, 3), Restart(3.0, 4), GiveUp(5)]


def test_a_run_that_lasted_starts_the_count_again() -> None:
    assert POLICY.after_exit(4, ran_s=30.0) == Restart(0.5, 0)
    assert POLICY.after_exit(4, ran_s=29.9) == GiveUp(5)


def test_exits_are_described_by_code_or_signal() -> None:
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(-200) == "was killed by signal 200"


class _Child:
    """A stand-in broker: a real child process that runs `code`."""

    def __init__(self, code: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", code])

    def wait(self) -> str:
        return describe_exit(self.proc.wait())

    def stop(self) -> None:
        stop_process(self.proc)


FAST = RestartPolicy(first_delay_s=0.01, max_delay_s=0.05, quick_s=5, give_up_after=3)


def test_a_crashed_broker_is_restarted_and_logged_without_its_output(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kgov.broker")
    started: list[_Child] = []

    def start() -> _Child:
        # the first crashes at once with a "secret" on its output; the second runs until stopped
        code = "print('password=hunter2'); raise SystemExit(3)" if not started else "import time; time.sleep(60)"
        started.append(_Child(code))
        return started[-1]

    gave_up: list[str] = []
    supervisor = BrokerSupervisor(start, log_hint="DATA/tansu.log", on_give_up=gave_up.append, policy=FAST)
    supervisor.watch()
    try:
        assert wait_for(lambda: supervisor.restarts == 1)
        assert supervisor.problem() is None and supervisor.broker is started[1]
    finally:
        supervisor.stop()
    assert started[1].proc.returncode is not None  # stopped with the supervisor, not restarted
    assert supervisor.restarts == 1 and gave_up == []
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("the embedded broker (Tansu) exited with code 3 after")
    assert "DATA/tansu.log" in errors[0]
    assert "hunter2" not in caplog.text


def test_health_says_the_broker_is_down_until_it_runs_again(tmp_path: Path) -> None:
    release = threading.Event()
    started: list[_Child] = []

    def start() -> _Child:
        if started:
            release.wait(10)  # the restart is held up: the broker is down meanwhile
        started.append(_Child("import time; time.sleep(60)"))
        return started[-1]

    supervisor = BrokerSupervisor(start, log_hint="tansu.log", on_give_up=lambda _: None, policy=FAST)
    app = build_app(load_settings(data_dir=tmp_path, dev_mode=True))
    app.state.health_checks.append(supervisor.problem)
    supervisor.watch()
    try:
        with TestClient(app) as client:
            assert client.get("/health").json() == {"status": "UP"}
            started[0].proc.kill()
            assert wait_for(lambda: client.get("/health").status_code == 503)
            assert client.get("/health").json() == {
                "error_code": 503, "message": "the embedded broker (Tansu) is down; kgov up is restarting it"}
            release.set()
            assert wait_for(lambda: client.get("/health").status_code == 200)
    finally:
        release.set()
        supervisor.stop()


def test_failed_starts_count_as_quick_failures_and_end_in_giving_up(caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def start() -> _Child:
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("nothing listens on 127.0.0.1:9092 after 30s")
        return _Child("raise SystemExit(1)")

    gave_up: list[str] = []
    supervisor = BrokerSupervisor(start, log_hint="tansu.log", on_give_up=gave_up.append, policy=FAST)
    supervisor.watch()
    try:
        assert wait_for(lambda: gave_up)
    finally:
        supervisor.stop()
    assert len(calls) == 3 and supervisor.restarts == 0
    assert gave_up == [supervisor.gave_up]
    assert gave_up[0] == ("the embedded broker (Tansu) failed 3 times in a row within 5 s of starting "
                          "(last: did not start); giving up. See tansu.log")
    assert "did not restart: nothing listens on 127.0.0.1:9092" in caplog.text
    assert supervisor.problem() == "the embedded broker (Tansu) is down; kgov up gave up restarting it"


def test_stop_while_waiting_to_restart_starts_nothing() -> None:
    started: list[_Child] = []

    def start() -> _Child:
        started.append(_Child("raise SystemExit(1)"))
        return started[-1]

    slow = RestartPolicy(first_delay_s=30, max_delay_s=30, quick_s=5, give_up_after=3)
    supervisor = BrokerSupervisor(start, log_hint="tansu.log", on_give_up=lambda _: None, policy=slow)
    supervisor.watch()
    assert wait_for(lambda: supervisor.problem() is not None)
    begun = time.monotonic()
    supervisor.stop()
    assert time.monotonic() - begun < 5 and len(started) == 1
