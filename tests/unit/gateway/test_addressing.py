"""Broker address rewriting: clients only ever learn gateway addresses."""

from __future__ import annotations

from gateway.addressing import AddressPlan, BrokerMap
from gateway.codec import SPECS


def test_per_node_ports_and_listener_opening() -> None:
    opened: list[tuple[int, tuple[str, int]]] = []
    bm = BrokerMap(AddressPlan("gw.example", 9192, "per-node", node_port_base=10000),
                   lambda n, a: opened.append((n, a)))
    assert bm.advertise(3, "10.0.0.3", 9092) == ("gw.example", 10003)
    assert bm.advertise(3, "10.0.0.3", 9092) == ("gw.example", 10003)
    assert opened == [(3, ("10.0.0.3", 9092))]  # once per node
    assert bm.upstream_of(3) == ("10.0.0.3", 9092) and bm.upstream_of(4) is None
    assert bm.advertise(-1, "x", 1) == ("x", 1)  # "no node" markers stay


def test_single_address_mode_advertises_the_listener_for_every_node() -> None:
    opened: list[int] = []
    bm = BrokerMap(AddressPlan("127.0.0.1", 9192, "single"), lambda n, a: opened.append(n))
    assert bm.advertise(1, "b1", 9092) == bm.advertise(2, "b2", 9092) == ("127.0.0.1", 9192)
    assert opened == []


def test_metadata_find_coordinator_describe_cluster_and_leader_hints() -> None:
    bm = BrokerMap(AddressPlan("gw", 9000, "per-node", node_port_base=9100))
    meta = SPECS[3].response
    broker = meta.fields["brokers"].data_class
    m = meta(brokers=[broker(node_id=1, host="b1", port=9092), broker(node_id=2, host="b2", port=9092)])
    rewrite = bm.response_rewriter(3, 12)
    assert rewrite is not None
    rewrite(m)
    assert [(b.host, b.port) for b in m.brokers] == [("gw", 9101), ("gw", 9102)]

    fc = SPECS[10].response
    v3 = fc(error_code=0, node_id=2, host="b2", port=9092)
    bm.response_rewriter(10, 3)(v3)  # type: ignore[misc]
    assert (v3.host, v3.port) == ("gw", 9102)
    failed = fc(error_code=15, node_id=-1, host="", port=-1)
    bm.response_rewriter(10, 3)(failed)  # type: ignore[misc]
    assert (failed.host, failed.port) == ("", -1)
    coordinator = fc.fields["coordinators"].data_class
    v4 = fc(coordinators=[coordinator(key="g", node_id=1, host="b1", port=9092, error_code=0),
                          coordinator(key="h", node_id=-1, host="", port=-1, error_code=15)])
    bm.response_rewriter(10, 4)(v4)  # type: ignore[misc]
    assert [(c.host, c.port) for c in v4.coordinators] == [("gw", 9101), ("", -1)]

    dc = SPECS[60].response
    dbroker = dc.fields["brokers"].data_class
    cluster = dc(brokers=[dbroker(broker_id=2, host="b2", port=9092)])
    bm.response_rewriter(60, 0)(cluster)  # type: ignore[misc]
    assert (cluster.brokers[0].host, cluster.brokers[0].port) == ("gw", 9102)

    produce = SPECS[0].response
    endpoint = produce.fields["node_endpoints"].data_class
    hint = produce(responses=[], node_endpoints=[endpoint(node_id=7, host="b7", port=9092)])
    assert bm.response_rewriter(0, 9) is None  # no leader hints before v10
    bm.response_rewriter(0, 10)(hint)  # type: ignore[misc]
    assert (hint.node_endpoints[0].host, hint.node_endpoints[0].port) == ("gw", 9107)
