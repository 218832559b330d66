"""A plain TCP relay on a fixed loopback port: a broker that can go away and come back with its data.

`stop()` closes the listener and every relayed connection, so clients see the broker down (connections
refused) while the broker behind keeps its topics; `start()` listens again on the same port. Tansu with
memory storage loses its topics when it restarts, so tests of "broker down, broker back" stop the relay
instead, with Tansu advertising the relay's address (tests.support.tansu.tansu_broker_advertising).
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.ports import free_port


class TcpRelay:
    def __init__(self, upstream: tuple[str, int], port: int | None = None) -> None:
        self.upstream = upstream
        self.port = port if port is not None else free_port()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self._spawn(self._accept, listener)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stop() closed the listener
            try:
                up = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            up.settimeout(None)
            with self._lock:
                self._sockets.update((client, up))
            self._spawn(self._pump, client, up)
            self._spawn(self._pump, up, client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        """Refuses new connections and cuts the open ones; returns once every relay thread ended."""
        if self._listener is not None:
            # shutdown() wakes the thread blocked in accept() (close() alone would not on Linux).
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(10)
        self._threads = []
        for s in sockets:
            s.close()

    def __enter__(self) -> TcpRelay:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
