"""Every age and time-to-live kgov keeps is measured on `authz.clock.elapsed_clock`, which counts the time
the machine spent suspended: on `time.monotonic` (CLOCK_MONOTONIC) a cache entry, a JWKS, a data key or a
credential snapshot would come back from a long suspend as fresh as it went in."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from authz.clock import elapsed_clock
from encryption.datakeys import DataKeyCache, DataKeyIssuer
from encryption.fields import _DeterministicKeys
from registry.service import SchemaRegistry
from sasl.jwt_validation import JwksCache
from sasl.service import FailureLimiter, _PlainCache


@pytest.mark.parametrize(("cls", "parameter"), [
    (FailureLimiter, "monotonic"),
    (_PlainCache, "monotonic"),
    (JwksCache, "monotonic"),
    (SchemaRegistry, "monotonic"),
    (_DeterministicKeys, "now"),
    (DataKeyIssuer, "now"),
    (DataKeyCache, "now"),
])
def test_default_clock_counts_suspended_time(cls: Callable[..., Any], parameter: str) -> None:
    assert inspect.signature(cls).parameters[parameter].default is elapsed_clock
