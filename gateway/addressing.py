"""Broker address rewriting: clients must only ever learn the gateway's addresses.

Two schemes (Kroxylicious's "port identifies node", Tansu proxy's single address):
- `per-node`: broker `n` is advertised as `advertised_host:(node_port_base + n)`; the gateway listens
  there and forwards that port's connections to broker `n`'s real address, learned from Metadata.
- `single`: every broker is advertised as the gateway's own listener; all traffic goes to the
  configured upstream (right for single-node upstreams such as Tansu or a load-balanced endpoint).

Rewritten: Metadata brokers, DescribeCluster brokers, FindCoordinator (v0-3 top level, v4+ each
coordinator with node id >= 0), and the KIP-951 leader hints (`node_endpoints`) of Produce v10+.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class AddressPlan:
    advertised_host: str
    listen_port: int
    mode: Literal["per-node", "single"] = "per-node"
    node_port_base: int | None = None  # default: listen_port + 1

    def advertised_port(self, node_id: int) -> int:
        if self.mode == "single":
            return self.listen_port
        base = self.node_port_base if self.node_port_base is not None else self.listen_port + 1
        return base + node_id


class BrokerMap:
    """What each node id is upstream and how it is advertised. `on_new_node` opens its listener."""

    def __init__(self, plan: AddressPlan, on_new_node: Callable[[int, Address], None] | None = None) -> None:
        self.plan = plan
        self._upstream: dict[int, Address] = {}
        self._lock = threading.Lock()
        self._on_new_node = on_new_node

    def upstream_of(self, node_id: int) -> Address | None:
        return self._upstream.get(node_id)

    def advertise(self, node_id: int, host: str, port: int) -> Address:
        if node_id < 0:
            return host, port
        with self._lock:
            known = self._upstream.get(node_id)
            self._upstream[node_id] = (host, port)
        if known is None and self._on_new_node is not None and self.plan.mode == "per-node":
            self._on_new_node(node_id, (host, port))
        return self.plan.advertised_host, self.plan.advertised_port(node_id)

    # Response rewriters (decoded kafka-python messages, mutated in place).

    def rewrite_metadata(self, response: Any) -> None:
        for b in response.brokers:
            b.host, b.port = self.advertise(b.node_id, b.host, b.port)

    def rewrite_describe_cluster(self, response: Any) -> None:
        for b in response.brokers:
            b.host, b.port = self.advertise(b.broker_id, b.host, b.port)

    def rewrite_find_coordinator(self, response: Any, version: int) -> None:
        if version < 4:
            if response.node_id >= 0 and response.error_code == 0:
                response.host, response.port = self.advertise(response.node_id, response.host, response.port)
            return
        for c in response.coordinators:
            if c.node_id >= 0 and c.error_code == 0:
                c.host, c.port = self.advertise(c.node_id, c.host, c.port)

    def rewrite_node_endpoints(self, response: Any) -> None:
        for e in response.node_endpoints or ():
            e.host, e.port = self.advertise(e.node_id, e.host, e.port)

    def response_rewriter(self, api_key: int, version: int) -> Callable[[Any], None] | None:
        if api_key == 3:
            return self.rewrite_metadata
        if api_key == 60:
            return self.rewrite_describe_cluster
        if api_key == 10:
            return lambda r: self.rewrite_find_coordinator(r, version)
        if api_key == 0 and version >= 10:
            return self.rewrite_node_endpoints
        return None
