"""Key-management systems: the `Kms` interface and `LocalKms`, a key ring in a local file.

A KMS holds key-encryption keys (KEKs) by name; each name has numbered versions and one current
version. Data keys (DEKs) are generated locally and wrapped by the KMS under the current version;
the version travels with the wrapped key, so rotating a KEK never makes old records unreadable.
Producers move to a new version when they replace their data key (`DataKeyPolicy`: at most 1 hour
or 5M records by default); `encryption.reencrypt` rewrites old records when a version must retire.

`derived_secret(name, label)` returns a secret that stays the same across rotations (it is derived
from version 1). Keyed hashes of message keys and deterministic field encryption need that: a
rotation must not change the hash of a key (compaction) or the ciphertext of a joinable field.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import re
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from encryption.errors import InsecureKeyRingError, KeyNotFoundError, KmsError, KmsUnavailableError

KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_key_name(name: str) -> str:
    if not isinstance(name, str) or not KEY_NAME.match(name):
        raise KmsError(
            "key names are 1-128 characters of letters, digits, '.', '_' or '-', starting with a letter "
            "or digit"
        )
    return name


@dataclass(frozen=True, slots=True)
class WrappedKey:
    """A data key wrapped by a KEK: what travels with the records (never the plaintext key)."""

    key_name: str
    version: int
    blob: bytes = field(repr=False)


@runtime_checkable
class Kms(Protocol):
    """What the serdes need from a key-management system."""

    def wrap(self, key_name: str, data_key: bytes) -> WrappedKey:
        """Wraps `data_key` under the current version of `key_name`."""

    def unwrap(self, wrapped: WrappedKey) -> bytes:
        """Returns the data key; raises KeyNotFoundError, KmsUnavailableError or KmsError."""

    def derived_secret(self, key_name: str, label: bytes) -> bytes:
        """A 32-byte secret for `label`, stable across rotations of `key_name`."""

    def current_version(self, name: str) -> int:
        """The version new data keys are wrapped under."""

    def create_key(self, name: str) -> int:
        """Creates a KEK; returns its version (1). Creating an existing key is an error."""

    def rotate_key(self, name: str) -> int:
        """Adds a new current version; old versions stay usable for unwrapping. Returns it."""


@dataclass(frozen=True, slots=True)
class _KeyVersions:
    current: int
    material: Mapping[int, bytes] = field(repr=False)


_RING_FORMAT = "kgov-keyring"
_WRAP_LABEL = b"kgov-localkms-wrap-v1"


class LocalKms:
    """A key ring in one JSON file (mode 0600, created on first use).

    The file holds every version of every KEK, so it is as sensitive as the data: the constructor
    refuses a file (or re-reads of it) owned by another user or whose mode lets anyone but the owner
    read or write it. Several
    processes may share one file; writers take an advisory lock, readers reload when they meet a
    version they do not know yet (another process rotated). Key material never appears in a repr,
    a log line or an error message.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._keys: Mapping[str, _KeyVersions] = {}
        self._stamp: tuple[int, int] | None = None
        if not self.path.exists():
            self._create_empty()
        self._reload()

    def __repr__(self) -> str:
        return f"LocalKms(path={str(self.path)!r}, keys={sorted(self._keys)!r})"

    # -- file handling ------------------------------------------------------------------------

    def _create_empty(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"format": _RING_FORMAT, "version": 1, "keys": {}}, out)

    def _check_mode(self, st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise InsecureKeyRingError(f"key ring {self.path} is not a regular file")
        if st.st_uid != os.geteuid():
            # A ring planted by another user (mode 0600: readable by its owner and by root) holds KEKs that
            # user knows; a process running as root would otherwise adopt it (as ssh's StrictModes).
            raise InsecureKeyRingError(
                f"key ring {self.path} is owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}"
            )
        if st.st_mode & 0o077:
            raise InsecureKeyRingError(
                f"key ring {self.path} has mode {stat.S_IMODE(st.st_mode):04o}; only its owner may read "
                f"it: run `chmod 600 {self.path}`"
            )

    def _reload(self) -> None:
        try:
            with open(self.path, "rb") as handle:
                st = os.fstat(handle.fileno())
                self._check_mode(st)
                raw = handle.read()
        except FileNotFoundError as exc:
            raise KeyNotFoundError(f"key ring {self.path} does not exist") from exc
        except OSError as exc:
            raise KmsUnavailableError(f"cannot read key ring {self.path}: {exc.strerror}") from exc
        self._keys = self._parse(raw)
        self._stamp = (st.st_mtime_ns, st.st_size)

    def _parse(self, raw: bytes) -> dict[str, _KeyVersions]:
        try:
            document = json.loads(raw)
            if document.get("format") != _RING_FORMAT or document.get("version") != 1:
                raise ValueError("unknown key-ring format")
            keys: dict[str, _KeyVersions] = {}
            for name, entry in document["keys"].items():
                material = {int(v): base64.b64decode(item["material"]) for v, item in entry["versions"].items()}
                if any(len(m) != 32 for m in material.values()) or int(entry["current"]) not in material:
                    raise ValueError("bad key entry")
                keys[name] = _KeyVersions(int(entry["current"]), material)
            return keys
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Nothing of the document in the error, nor in its chain: JSONDecodeError keeps the whole
            # document (`.doc`), int() and KeyError quote what they read, and error reporters print
            # (some keep) every exception of the chain. Its type and, for JSON, the position only.
            where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            problem = f"{type(exc).__name__}{where}"
        # Raised outside the except block, so the cause is neither chained nor kept as __context__.
        raise KmsError(f"key ring {self.path} is corrupt or not a kgov key ring ({problem})")

    def _maybe_reload(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return
        if (st.st_mtime_ns, st.st_size) != self._stamp:
            self._reload()

    @contextmanager
    def _writing(self) -> Iterator[dict[str, Any]]:
        lock_path = self.path.with_name(self.path.name + ".lock")
        with self._lock:
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError as exc:  # ELOOP: a symlink planted where the lock file goes
                raise InsecureKeyRingError(f"cannot open the key ring's lock file {lock_path}: {exc.strerror}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._reload()
                document: dict[str, Any] = {
                    "format": _RING_FORMAT,
                    "version": 1,
                    "keys": {
                        name: {
                            "current": versions.current,
                            "versions": {
                                str(v): {"material": base64.b64encode(m).decode("ascii")}
                                for v, m in sorted(versions.material.items())
                            },
                        }
                        for name, versions in self._keys.items()
                    },
                }
                yield document
                # A fresh file of our own (mkstemp: O_EXCL, mode 0600, never through a symlink): a fixed
                # name opened with O_TRUNC would reuse a stale or planted file, its mode (0644) or its
                # symlink target, and write every KEK there.
                out_fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
                try:
                    with os.fdopen(out_fd, "w", encoding="utf-8") as out:
                        json.dump(document, out, indent=1)
                        out.flush()
                        os.fsync(out.fileno())
                    os.replace(tmp, self.path)
                except BaseException:
                    with suppress(FileNotFoundError):
                        os.unlink(tmp)
                    raise
                self._reload()
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    # -- key management ----------------------------------------------------------------------

    def create_key(self, name: str) -> int:
        check_key_name(name)
        with self._writing() as document:
            if name in document["keys"]:
                raise KmsError(f"key {name!r} already exists; use rotate_key to add a version")
            document["keys"][name] = {
                "current": 1,
                "versions": {"1": self._new_version()},
            }
        return 1

    def rotate_key(self, name: str) -> int:
        check_key_name(name)
        with self._writing() as document:
            entry = document["keys"].get(name)
            if entry is None:
                raise KeyNotFoundError(f"no key named {name!r}")
            version = max(int(v) for v in entry["versions"]) + 1
            entry["versions"][str(version)] = self._new_version()
            entry["current"] = version
        return version

    def ensure_key(self, name: str) -> int:
        """Creates `name` if it does not exist; returns its current version."""
        check_key_name(name)
        self._maybe_reload()
        if name not in self._keys:
            try:
                self.create_key(name)
            except KmsError:
                self._reload()
                if name not in self._keys:
                    raise
        return self._keys[name].current

    def key_names(self) -> list[str]:
        self._maybe_reload()
        return sorted(self._keys)

    def current_version(self, name: str) -> int:
        return self._versions(name).current

    @staticmethod
    def _new_version() -> dict[str, str]:
        return {
            "material": base64.b64encode(os.urandom(32)).decode("ascii"),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }

    def _versions(self, name: str) -> _KeyVersions:
        versions = self._keys.get(name)
        if versions is None:
            self._maybe_reload()
            versions = self._keys.get(name)
        if versions is None:
            raise KeyNotFoundError(f"no key named {name!r}")
        return versions

    def _material(self, name: str, version: int) -> bytes:
        versions = self._versions(name)
        material = versions.material.get(version)
        if material is None:
            self._maybe_reload()
            material = self._versions(name).material.get(version)
        if material is None:
            raise KeyNotFoundError(f"key {name!r} has no version {version}")
        return material

    # -- Kms ---------------------------------------------------------------------------------

    @staticmethod
    def _wrap_aad(name: str, version: int) -> bytes:
        return _WRAP_LABEL + version.to_bytes(4, "big") + name.encode("utf-8")

    def wrap(self, key_name: str, data_key: bytes) -> WrappedKey:
        self._maybe_reload()  # pick up a rotation made by another process (one stat per data key)
        versions = self._versions(key_name)
        version = versions.current
        nonce = os.urandom(12)
        blob = nonce + AESGCM(versions.material[version]).encrypt(
            nonce, data_key, self._wrap_aad(key_name, version)
        )
        return WrappedKey(key_name, version, blob)

    def unwrap(self, wrapped: WrappedKey) -> bytes:
        material = self._material(wrapped.key_name, wrapped.version)
        blob = wrapped.blob
        try:
            return AESGCM(material).decrypt(
                blob[:12], blob[12:], self._wrap_aad(wrapped.key_name, wrapped.version)
            )
        except (InvalidTag, ValueError) as exc:
            raise KmsError(f"wrapped data key does not open under {wrapped.key_name!r} v{wrapped.version}") from exc

    def derived_secret(self, key_name: str, label: bytes) -> bytes:
        first = min(self._versions(key_name).material)
        return hmac.new(self._material(key_name, first), b"kgov-derived-v1:" + label, hashlib.sha256).digest()
