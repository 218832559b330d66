"""The authorizer benchmark builds the scenario it claims (bench/authz_bench.py); nothing is timed here."""

from __future__ import annotations

import importlib.util
import random
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from authz.decide import AuthorizerData
from authz.model import Action, Operation, PatternType, Permission, Principal, ResourceType

BENCH = Path(__file__).resolve().parents[3] / "bench" / "authz_bench.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("authz_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.mark.parametrize(("deny", "twins"), [(0.0, 0), (100.0, 1)])
def test_counts_follow_kafkas_setup(bench: ModuleType, deny: float, twins: int) -> None:
    acls = bench.scenario_acls(40, deny, prefix_hosts=10)
    per_resource = 10 * (1 + twins)
    wildcard_hosts = 40 // 10
    assert len(acls) == 40 * per_resource + 10 * (1 + twins) + wildcard_hosts * (1 + twins)
    by_pattern = Counter((a.resource_type, a.pattern_type, a.resource_name) for a in acls)
    for i in range(40):
        rt = ResourceType.GROUP if i % 10 == 0 else ResourceType.TOPIC
        pt = PatternType.PREFIXED if i % 5 == 0 else PatternType.LITERAL
        assert by_pattern[(rt, pt, f"foo-bar35_resource-{i}")] == per_resource
    assert by_pattern[(ResourceType.TOPIC, PatternType.PREFIXED, "foo-bar35_resource-")] == 10 * (1 + twins)
    assert by_pattern[(ResourceType.TOPIC, PatternType.LITERAL, "*")] == wildcard_hosts * (1 + twins)
    resource_acls = [a for a in acls if a.resource_name.startswith("foo-bar35_resource-") and a.host == "*"]
    assert {a.principal for a in resource_acls} == {"User:test-user"} | {f"User:test-user{k}" for k in range(1, 10)}
    assert {a.operation for a in acls} == {Operation.READ}
    assert Counter(a.permission for a in acls)[Permission.DENY] == twins * (len(acls) // 2)
    prefix_hosts = {a.host for a in acls if a.resource_name == "foo-bar35_resource-"}
    assert prefix_hosts == {f"127.0.0.{h}" for h in range(10)}
    wildcard = {a.host for a in acls if a.resource_name == "*"}
    assert wildcard == {f"127.0.0{h}" for h in range(wildcard_hosts)}  # Kafka's dot-less spelling


def test_deny_share_is_about_the_percentage(bench: ModuleType) -> None:
    generated = bench.resource_acls(2000, 20.0, random.Random(7))
    denies = sum(a.permission is Permission.DENY for a in generated.acls)
    assert 0.18 < denies / 20_000 < 0.22


def test_smaller_sizes_are_a_prefix_of_one_generation(bench: ModuleType) -> None:
    generated = bench.resource_acls(50, 99.0, random.Random(3))
    small = bench.scenario_acls(20, 99.0, seed=3, prefix_hosts=5, generated=generated)
    assert small == bench.scenario_acls(20, 99.0, seed=3, prefix_hosts=5)
    assert {a.resource_name for a in small} == {f"foo-bar35_resource-{i}" for i in range(20)} | {
        "foo-bar35_resource-", "*"}
    with pytest.raises(ValueError, match="only 50 resources"):
        generated.first(51)


@pytest.mark.parametrize(("deny", "read_allowed"), [(0.0, True), (100.0, False)])
def test_kafkas_actions_decide_as_expected(bench: ModuleType, deny: float, read_allowed: bool) -> None:
    data = AuthorizerData.build(bench.scenario_acls(100, deny, prefix_hosts=10))
    ctx = bench.authorize_context()
    assert ctx.principal == Principal("User", "test-user") and ctx.client_address == "127.0.0.1"
    action = bench.kafka_action()
    assert (action.resource_type, action.resource_name, action.operation) == (
        ResourceType.TOPIC, "foo-bar35_resource-95", Operation.WRITE)
    # Only READ ACLs exist, so the WRITE is refused by default deny after scanning the patterns.
    [write] = data.authorize(ctx, [action])
    assert not write.allowed and str(write.rule) == "DefaultDeny"
    [read] = data.authorize(ctx, [Action(ResourceType.TOPIC, "foo-bar35_resource-95", Operation.READ)])
    assert read.allowed is read_allowed
    fresh = bench.fresh(data)
    assert fresh is not data and len(fresh) == len(data)
    by_type = data.authorize_by_resource_type(bench.authorize_context(bench.BY_TYPE_HOST), Operation.READ,
                                              ResourceType.TOPIC)
    assert by_type.allowed is read_allowed


def test_metadata_scenario_is_500_topics_and_7000_acls(bench: ModuleType) -> None:
    acls, actions = bench.metadata_scenario()
    assert len(acls) == 7000 and len(set(acls)) == 7000
    assert len(actions) == 500 and {a.operation for a in actions} == {Operation.DESCRIBE}
    assert len({a.resource_name for a in actions}) == 500
    data = AuthorizerData.build(acls)
    decisions = data.authorize(bench.authorize_context("10.1.2.3", bench.METADATA_PRINCIPAL), actions)
    assert all(d.allowed for d in decisions)
    outsider = data.authorize(bench.authorize_context("10.1.2.3", Principal("User", "nobody")), actions)
    assert not any(d.allowed for d in outsider)
