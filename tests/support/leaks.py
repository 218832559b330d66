"""Opt-in pytest plugin: a resource leaked by a test fails that test, not a later one.

Warnings are errors here (pyproject's filterwarnings), so an unclosed socket, file or event loop fails
the test during which the garbage collector finds it, which for an object in a reference cycle is
whichever test next allocates enough to trigger a full collection (an import-heavy one, such as
tests/unit/kgov/test_cli_exposure.py's first): the report then names an innocent test. When a test
fails with a PytestUnraisableExceptionWarning about something it never opened, rerun the files up to
it with

    python -m pytest -p tests.support.leaks <files>

and the leak is reported at the teardown of the test that made it. Not on by default: a full
collection after every test costs seconds over the suite.
"""

from __future__ import annotations

import gc
from collections.abc import Generator

import pytest
from _pytest.unraisableexception import collect_unraisable


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    yield
    gc.collect()
    collect_unraisable(item.config)


# kafka-python 3.0.12's KafkaNetSocket.sock_connect raises on a refused connect without closing the socket
# it opened (kafka/net/inet.py), so every reconnect to a broker that is down leaves a socket for the garbage
# collector, which then warns (ResourceWarning). Tests that keep a kafka-python client connecting to a
# broker that is down mark themselves with KAFKA_PYTHON_CONNECT_LEAKS and use the fixture below, so the
# sockets are collected, silently, before the next test runs.
KAFKA_PYTHON_CONNECT_LEAKS = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture
def collect_kafka_python_connect_leaks() -> Generator[None, None, None]:
    yield
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
