"""Kafka's quota semantics: 8-level precedence, shared groups, padded windows, throttle formula."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.quota_model import (
    CONNECTION_CREATION_RATE,
    DEFAULT_PART,
    NONE_PART,
    PRODUCER_BYTE_RATE,
    EntityPart,
    QuotaEntity,
    QuotaError,
    Rate,
    ip_entity_name,
    ip_lookup_key,
    resolve,
    resolve_ip,
    throttle_time_ms,
)
from gateway.quota_store import QuotaOp, validate_ops
from gateway.quotas import QuotaEnforcer

U, C = EntityPart.of("alice"), EntityPart.of("app")
LEVELS = [
    QuotaEntity(U, C), QuotaEntity(U, DEFAULT_PART), QuotaEntity(U, NONE_PART),
    QuotaEntity(DEFAULT_PART, C), QuotaEntity(DEFAULT_PART, DEFAULT_PART), QuotaEntity(DEFAULT_PART, NONE_PART),
    QuotaEntity(NONE_PART, C), QuotaEntity(NONE_PART, DEFAULT_PART),
]


@pytest.mark.parametrize("level", range(8))
def test_the_most_specific_of_the_eight_levels_wins(level: int) -> None:
    configs = {e: {PRODUCER_BYTE_RATE: float(i + 1)} for i, e in enumerate(LEVELS) if i >= level}
    applied = resolve(configs, PRODUCER_BYTE_RATE, "alice", "app")
    assert applied is not None and applied.bound == level + 1 and applied.entity == LEVELS[level]


def test_unrelated_entities_and_keys_do_not_apply() -> None:
    configs = {QuotaEntity(EntityPart.of("bob")): {PRODUCER_BYTE_RATE: 1.0}, QuotaEntity(U): {"other": 1.0}}
    assert resolve(configs, PRODUCER_BYTE_RATE, "alice", "app") is None


def test_quota_groups_share_by_matched_entity() -> None:
    # A user-level quota is shared by all that user's client ids; a default one is per actual user.
    assert resolve({QuotaEntity(U): {PRODUCER_BYTE_RATE: 1}}, PRODUCER_BYTE_RATE, "alice", "x").group == ("alice", "")
    d = resolve({QuotaEntity(DEFAULT_PART, DEFAULT_PART): {PRODUCER_BYTE_RATE: 1}}, PRODUCER_BYTE_RATE, "alice", "x")
    assert d is not None and d.group == ("alice", "x")
    c = resolve({QuotaEntity(NONE_PART, C): {PRODUCER_BYTE_RATE: 1}}, PRODUCER_BYTE_RATE, "alice", "app")
    assert c is not None and c.group == ("", "app")


def test_ip_quota_name_then_default() -> None:
    configs = {QuotaEntity(ip=DEFAULT_PART): {CONNECTION_CREATION_RATE: 5.0},
               QuotaEntity(ip=EntityPart.of("10.0.0.1")): {CONNECTION_CREATION_RATE: 1.0}}
    assert resolve_ip(configs, "10.0.0.1") == 1.0 and resolve_ip(configs, "10.0.0.2") == 5.0
    assert resolve_ip({}, "10.0.0.1") is None


def test_rate_pads_the_elapsed_time_to_n_minus_one_windows() -> None:
    r = Rate(11, 1000)
    r.record(1000, now_ms=0)
    assert r.window_size_ms(500) == 10_500  # 0.5 s elapsed + 10 padded windows
    assert r.measure(500) == pytest.approx(1000 / 10.5)
    for t in range(1, 21):
        r.record(1000, now_ms=t * 1000)
    # after 20 s only the last 11 samples remain; elapsed = 10.x s, no padding needed
    assert r.window_size_ms(20_500) == pytest.approx(10_500)
    assert r.measure(20_500) == pytest.approx(11_000 / 10.5)


def test_throttle_time_follows_kafkas_formula() -> None:
    r = Rate(11, 1000)
    r.record(15_000, now_ms=0)  # 15 kB in a padded 10 s window: 1.5 kB/s against 1 kB/s
    assert throttle_time_ms(r, 1000.0, now_ms=0) == round((1500 - 1000) / 1000 * 10_000)
    assert throttle_time_ms(r, 2000.0, now_ms=0) == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50_000), st.integers(1, 10_000)), min_size=1, max_size=50),
       st.floats(min_value=1, max_value=1e6))
def test_throttle_is_zero_exactly_when_the_rate_is_within_bound(events: list[tuple[int, int]], bound: float) -> None:
    r = Rate(11, 1000)
    now = 0
    for dt, value in events:
        now += dt
        r.record(value, now)
    t = throttle_time_ms(r, bound, now)
    measured, window = r.measure(now), r.window_size_ms(now)
    assert window >= 10_000  # never less than N-1 windows
    if measured <= bound:
        assert t == 0
    else:
        assert t == round((measured - bound) / bound * window) >= 0


def test_enforcer_throttles_and_mutes_by_group() -> None:
    clock = [0.0]
    q = QuotaEnforcer(None, now_ms=lambda: clock[0])
    q.set_configs({QuotaEntity(U): {PRODUCER_BYTE_RATE: 1000.0, "consumer_byte_rate": 1000.0}})
    assert q.record_produce("alice", "a", 5_000) == 0  # 5 kB over a padded 10 s: 500 B/s
    assert q.record_produce("alice", "b", 10_000) == 5000  # same group (user-level): 1.5 kB/s
    assert q.record_produce("bob", "a", 10**9) == 0  # no quota for bob
    assert q.fetch_throttle_ms("alice", "a") == 0
    q.record_fetch("alice", "a", 20_000)
    assert q.fetch_throttle_ms("alice", "zzz") == 10_000


def test_connection_rate_refuses_and_does_not_count_refused_connections() -> None:
    clock = [0.0]
    q = QuotaEnforcer(None, now_ms=lambda: clock[0])
    q.set_configs({QuotaEntity(ip=DEFAULT_PART): {CONNECTION_CREATION_RATE: 0.2}})  # 2 per padded 10 s
    assert q.connection_delay_s("1.2.3.4") is None
    assert q.connection_delay_s("1.2.3.4") is None
    delay = q.connection_delay_s("1.2.3.4")
    assert delay is not None and delay > 0
    assert q.connection_delay_s("5.6.7.8") is None


@pytest.mark.parametrize(("entity", "op", "message"), [
    (QuotaEntity(), QuotaOp(PRODUCER_BYTE_RATE, 1), "empty"),
    (QuotaEntity(U, ip=DEFAULT_PART), QuotaOp(PRODUCER_BYTE_RATE, 1), "IP entity"),
    (QuotaEntity(U), QuotaOp("bogus", 1), "Unknown quota key"),
    (QuotaEntity(U), QuotaOp(CONNECTION_CREATION_RATE, 1), "cannot be set"),
    (QuotaEntity(U), QuotaOp(PRODUCER_BYTE_RATE, 0), "greater than 0"),
])
def test_invalid_quota_changes_are_refused(entity: QuotaEntity, op: QuotaOp, message: str) -> None:
    with pytest.raises(QuotaError, match=message):
        validate_ops(entity, [op])


# -- ip entities: validated and kept in the form a connection's address is looked up in -----------------

@pytest.mark.parametrize(("name", "kept"), [
    ("10.0.0.7", "10.0.0.7"),
    ("::ffff:10.0.0.7", "10.0.0.7"),  # IPv4-mapped: the IPv4 client it is (Java's Inet4Address)
    ("[10.0.0.7]", "10.0.0.7"),  # brackets, as InetAddress.getByName takes them
    ("2001:DB8::7", "2001:db8:0:0:0:0:0:7"),  # Java's getHostAddress() form
    ("[2001:db8::7]", "2001:db8:0:0:0:0:0:7"),
    ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1"),  # the zone dropped: InetAddress equality ignores the scope
    ("fe80::1%2", "fe80:0:0:0:0:0:0:1"),
])
def test_ip_entities_are_kept_in_their_lookup_form(name: str, kept: str) -> None:
    entity = QuotaEntity(ip=EntityPart.of(name)).normalised()
    assert entity == QuotaEntity(ip=EntityPart.of(kept))
    assert ip_entity_name(name) == kept == ip_lookup_key(name)


@pytest.mark.parametrize("name", [
    "10.0.0.0/24", "2001:db8::/64",  # networks
    "broker.example.com", "localhost",  # host names: not resolved (a departure from Kafka)
    "127.1", "010.0.0.7", "10.0.0.256", "1.2.3.4%eth0",  # legacy short forms, leading zeros, out of range, IPv4 zone
    "fe80::1%", "[10.0.0.7", " 10.0.0.7", "10.0.0.7\n", "",
])
def test_ip_entities_that_are_not_one_address_are_refused(name: str) -> None:
    message = f"{re.escape(name)} is not a valid IP address"
    with pytest.raises(QuotaError, match=message):
        validate_ops(QuotaEntity(ip=EntityPart.of(name)), [QuotaOp(CONNECTION_CREATION_RATE, 1)])
    with pytest.raises(QuotaError, match=message):
        QuotaEntity(ip=EntityPart.of(name)).normalised()
    # The default ip entity has no name to check.
    assert QuotaEntity(ip=DEFAULT_PART).normalised() == QuotaEntity(ip=DEFAULT_PART)


@pytest.mark.parametrize("peer", ["10.0.0.7", "::ffff:10.0.0.7"])
def test_a_connection_finds_its_ip_quota_whatever_form_the_socket_and_the_entity_use(peer: str) -> None:
    """A dual-stack listener reports an IPv4 client as `::ffff:10.0.0.7`; the entity may be written either way."""
    for written in ("10.0.0.7", "::ffff:10.0.0.7", "[10.0.0.7]"):
        configs = {QuotaEntity(ip=EntityPart.of(written)).normalised(): {CONNECTION_CREATION_RATE: 3.0}}
        assert resolve_ip(configs, peer) == 3.0
    v6 = {QuotaEntity(ip=EntityPart.of("fe80::1%eth0")).normalised(): {CONNECTION_CREATION_RATE: 2.0}}
    assert resolve_ip(v6, "fe80::1%eth1") == resolve_ip(v6, "fe80:0::1") == 2.0
    assert resolve_ip(v6, "fe80::2") is None


def test_the_connection_rate_of_one_address_is_one_sensor_whatever_its_spelling() -> None:
    q = QuotaEnforcer(None, now_ms=lambda: 0.0)
    q.set_configs({QuotaEntity(ip=EntityPart.of("10.0.0.7")).normalised(): {CONNECTION_CREATION_RATE: 0.2}})
    assert q.connection_delay_s("10.0.0.7") is None and q.connection_delay_s("::ffff:10.0.0.7") is None
    assert q.connection_delay_s("10.0.0.7") is not None  # the third in the padded 10 s, under either spelling
