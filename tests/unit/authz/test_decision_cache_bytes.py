"""A snapshot's caches keyed by callers' names are bounded in bytes, not only in entries.

The decision API takes principal and resource names up to 32,767 characters (Kafka's int16 STRING), so
200,000 cached decisions on such names would hold about 6.5 GB. `cache_max_bytes` bounds the three
caches together; answers stay those of a fresh scan.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from authz.config import AuthzConfig
from authz.database import open_engine
from authz.decide import _DECISIONS, DEFAULT_CACHE_MAX_BYTES, DEFAULT_CACHE_SIZE, AuthorizerData, _entry_bytes
from authz.model import (
    Acl,
    Action,
    Operation,
    PatternType,
    Permission,
    Principal,
    RequestContext,
    ResourceType,
)
from authz.service import AuthorizerService

LONG = 32_767  # the longest name the decision API reads (authz.api.MAX_OPA_STRING)

ACLS = [
    Acl(ResourceType.TOPIC, "orders-", PatternType.PREFIXED, "User:*", "*", Operation.READ, Permission.ALLOW),
    Acl(ResourceType.TOPIC, "orders-secret", PatternType.PREFIXED, "User:eve", "*", Operation.READ, Permission.DENY),
]


def fresh(text: str) -> str:
    """A new string object, as the decision API's JSON parsing makes for every request."""
    parsed: str = json.loads(json.dumps(text))
    return parsed


def ask(data: AuthorizerData, principal: str, name: str, host: str = "10.0.0.5", *,
        rt: ResourceType = ResourceType.TOPIC) -> bool:
    ctx = RequestContext(Principal("User", fresh(principal)), fresh(host))
    return data.authorize(ctx, [Action(rt, fresh(name), Operation.READ)])[0].allowed


def retained_bytes(fill: Iterator[None]) -> int:
    """Bytes still allocated after running `fill` (what the caches kept: the callers' strings are dropped)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in fill:
            pass
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_long_names_cannot_grow_the_decision_cache_past_its_byte_bound() -> None:
    data = AuthorizerData.build(ACLS, cache_max_bytes=1 << 20)

    def fill() -> Iterator[None]:
        for i in range(300):  # 300 x 32 KB of names: about 9.4 MB, were they all kept
            assert ask(data, f"user-{i}", f"orders-{i:06d}".ljust(LONG, "x")) is True
            yield

    kept = retained_bytes(fill())
    assert kept < 1.5 * (1 << 20), kept
    assert 0 < len(data._decisions) < 300


def test_many_principals_cannot_grow_the_principal_cache_past_the_byte_bound() -> None:
    """The effective-principal cache had no bound at all: every new principal name stayed until the next
    snapshot. It now counts against the byte bound (not the entry count: it kept every principal
    before, and `decision_cache_size = 0` should not turn it off)."""
    big = AuthorizerData.build(ACLS, cache_max_bytes=1 << 20)
    for i in range(200):
        ask(big, f"user-{i}".ljust(LONG, "y"), "orders-1")
    assert 0 < len(big._effective) < 40  # each entry holds the name twice (the principal and its text)
    uncached = AuthorizerData.build(ACLS, cache_size=0)
    for i in range(50):
        ask(uncached, f"user-{i % 5}", f"orders-{i}")
    assert len(uncached._effective) == 5 and len(uncached._decisions) == 1


def test_a_full_decision_cache_is_emptied_alone_and_no_longer_counted() -> None:
    data = AuthorizerData.build(ACLS, cache_size=10)
    for i in range(25):
        ask(data, "bob", f"orders-{i}")
    assert len(data._decisions) == 5 and len(data._effective) == 1  # emptied at the 11th and 21st
    entry = _entry_bytes("bob", "10.0.0.5", "orders-20", "User")
    assert data._held_bytes[_DECISIONS] == 5 * entry
    assert data.cached_bytes == 5 * entry + _entry_bytes("User", "bob", "User:bob")


def test_by_type_decisions_count_against_the_same_bound() -> None:
    data = AuthorizerData.build(ACLS, cache_max_bytes=1 << 20)
    for i in range(200):
        ctx = RequestContext(Principal("User", fresh(f"user-{i}".ljust(LONG, "z"))), "10.0.0.5")
        assert data.authorize_by_resource_type(ctx, Operation.READ, ResourceType.TOPIC).allowed
    assert 0 < len(data._by_type_decisions) < 40


def test_the_byte_count_errs_high_and_ordinary_names_fit_the_default_as_before() -> None:
    """The count is what the caches hold, or more (never less: that would let them past the bound),
    and 200,000 decisions on ordinary names (the default count bound) fit the default byte bound, so
    an ordinary workload caches as it did before the byte bound."""
    data = AuthorizerData.build(ACLS)

    def fill() -> Iterator[None]:
        for i in range(5_000):
            ask(data, f"user-{i % 100}", f"orders-eu-west-{i:08d}", f"10.0.{i >> 8 & 255}.{i & 255}")
            yield

    kept = retained_bytes(fill())
    assert len(data._decisions) == 5_000
    assert kept <= data.cached_bytes <= 2 * kept, (kept, data.cached_bytes)
    assert data.cached_bytes * (DEFAULT_CACHE_SIZE // 5_000) < DEFAULT_CACHE_MAX_BYTES


def test_answers_after_the_cache_empties_are_those_of_a_fresh_scan() -> None:
    cached = AuthorizerData.build(ACLS, cache_max_bytes=200_000)
    names = [f"orders-secret-{i}".ljust(LONG // 4, "s") for i in range(60)] + ["orders-1", "payments"]
    for principal in ("eve", "bob"):
        for name in names * 2:
            fresh_scan = AuthorizerData.build(ACLS)
            assert ask(cached, principal, name) == ask(fresh_scan, principal, name), (principal, name[:20])
    assert ask(cached, "bob", names[0]) is True and ask(cached, "eve", names[0]) is False


def test_the_setting_reaches_the_snapshot(tmp_path: Path) -> None:
    assert AuthzConfig().decision_cache_max_bytes == DEFAULT_CACHE_MAX_BYTES
    with pytest.raises(ValueError, match="decision_cache_max_bytes"):
        AuthzConfig(decision_cache_max_bytes=-1)
    engine = open_engine(f"sqlite:///{tmp_path}/kgov.db")
    node = AuthorizerService(engine, AuthzConfig(decision_cache_max_bytes=12345))
    node.start(background=False)
    try:
        assert node.data.cache_max_bytes == 12345
        node.create_acls(ACLS, actor=Principal("User", "admin"))  # a changed snapshot keeps it
        assert node.data.cache_max_bytes == 12345
    finally:
        node.close()
        engine.dispose()
