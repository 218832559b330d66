"""Quota enforcement for one gateway: the configured bounds (a snapshot, swapped atomically when the
database changes) and the per-group rate sensors the event loop records into.

Produce: bytes recorded, the response carries `throttle_time_ms`, then the client socket is muted for
that long (librdkafka ignores KIP-219's client-side throttling, so muting is what holds it). Fetch:
response bytes recorded; a fetch arriving while the group is over its bound gets an empty response
with the throttle time and a mute. Request time (`request_percentage`) is the gateway's own processing
time, bounded by one window as Kafka's ClientRequestQuotaManager does; every answer carries the mute it
brings (forwarded ones: the loop's time on the request and on the answer, the larger of the bandwidth
and request throttles for Produce and Fetch, `gateway.proxy.ClientConnection._on_request` and
`on_upstream_frame`; the gateway's own answers: `_serve_admin_request`, `_answer_api_versions`), and the
SASL exchange is not charged. Connections per IP over
`connection_creation_rate` are closed after the throttle delay (KIP-612).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gateway.quota_model import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaConfigs,
    Rate,
    ip_lookup_key,
    resolve,
    resolve_ip,
    throttle_time_ms,
)
from gateway.quota_store import QuotaStore

log = logging.getLogger("kgov.gateway.quotas")


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class QuotaEnforcer:
    def __init__(
        self,
        store: QuotaStore | None = None,
        *,
        window_num: int = 11,
        window_size_s: float = 1.0,
        now_ms: Callable[[], float] = _monotonic_ms,
        refresh_interval_s: float = 0.5,
    ) -> None:
        self._store = store
        self._window_num = window_num
        self._window_ms = int(window_size_s * 1000)
        self._now_ms = now_ms
        self._refresh_s = refresh_interval_s
        self._configs: QuotaConfigs = {}
        # The keys some entity sets: a key no quota sets costs one set lookup per request, not a resolve
        # through the 8 levels (the request quota is charged twice per forwarded request).
        self._keys: frozenset[str] = frozenset()
        self._version = -1
        self._sensors: dict[tuple[str, Any], Rate] = {}
        self._refresh_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._records = 0

    # -- configuration snapshot ---------------------------------------------------------------

    @property
    def configs(self) -> QuotaConfigs:
        return self._configs

    def set_configs(self, configs: QuotaConfigs) -> None:
        # `_keys` first: a reader between the two assignments resolves against the old configs, which
        # answer what they answered before (no key of the new ones is skipped for good).
        self._keys = frozenset(k for values in configs.values() for k in values) | self._keys
        self._configs = configs
        self._keys = frozenset(k for values in configs.values() for k in values)

    def refresh(self) -> None:
        """Loads the stored quotas if they changed. Called by the poll thread and by AlterClientQuotas on
        a gateway admin thread (`gateway.admin_apis`), so one at a time: unserialised, a slower load of an
        older version could swap its configs in after a newer one's version was noted, and the stale
        quotas would stay until the next change. Readers take `_configs` without a lock."""
        if self._store is None:
            return
        with self._refresh_lock:
            if self._store.version() == self._version:
                return
            self._version, configs = self._store.load()
            self.set_configs(configs)

    def start(self) -> None:
        self.refresh()
        if self._thread is None and self._store is not None:
            self._thread = threading.Thread(target=self._poll, name="kgov-quota-refresh", daemon=True)
            self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self._refresh_s):
            try:
                self.refresh()
            except Exception:  # keep the last snapshot when the database is briefly unavailable
                log.warning("quota refresh failed; keeping the previous quotas", exc_info=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # -- sensors ------------------------------------------------------------------------------

    def _sensor(self, key: str, group: Any) -> Rate:
        sensor = self._sensors.get((key, group))
        if sensor is None:
            sensor = self._sensors[(key, group)] = Rate(self._window_num, self._window_ms)
            self._records += 1
            if self._records % 1024 == 0:
                self._expire_idle()
        return sensor

    def _expire_idle(self) -> None:
        horizon = self._now_ms() - 3600_000  # Kafka expires inactive quota sensors after an hour
        for k in [k for k, s in self._sensors.items() if s.idle_since_ms < horizon]:
            del self._sensors[k]

    def _record(self, key: str, user: str, client_id: str, value: float) -> int:
        if key not in self._keys:
            return 0
        applied = resolve(self._configs, key, user, client_id)
        if applied is None:
            return 0
        now = self._now_ms()
        sensor = self._sensor(key, applied.group)
        sensor.record(value, now)
        return throttle_time_ms(sensor, applied.bound, now)

    def record_produce(self, user: str, client_id: str, nbytes: int) -> int:
        return self._record(PRODUCER_BYTE_RATE, user, client_id, float(nbytes))

    def record_fetch(self, user: str, client_id: str, nbytes: int) -> None:
        self._record(CONSUMER_BYTE_RATE, user, client_id, float(nbytes))

    def fetch_throttle_ms(self, user: str, client_id: str) -> int:
        if CONSUMER_BYTE_RATE not in self._keys:
            return 0
        applied = resolve(self._configs, CONSUMER_BYTE_RATE, user, client_id)
        if applied is None:
            return 0
        sensor = self._sensors.get((CONSUMER_BYTE_RATE, applied.group))
        return 0 if sensor is None else throttle_time_ms(sensor, applied.bound, self._now_ms())

    def record_request_time(self, user: str, client_id: str, seconds: float) -> int:
        """`request_percentage`: seconds * 100 per second of wall time; throttle capped at one window."""
        throttle = self._record(REQUEST_PERCENTAGE, user, client_id, seconds * 100.0)
        return min(throttle, self._window_ms)

    def connection_delay_s(self, ip: str) -> float | None:
        """None when the connection is accepted; else how long to wait before closing it."""
        bound = resolve_ip(self._configs, ip)
        if bound is None:
            return None
        now = self._now_ms()
        sensor = self._sensor("connection_creation_rate", ip_lookup_key(ip) or ip)
        sensor.record(1.0, now)
        throttle = throttle_time_ms(sensor, bound, now)
        if throttle <= 0:
            return None
        sensor.unrecord(1.0)  # Kafka does not count a connection it refuses
        return throttle / 1000.0
