"""The package's exceptions.

Consumers see exactly one type, `DecryptionError`, whatever went wrong (wrong or missing key, tampered
record, unknown format version, KMS outage after retries, bad signature): a reader never has to tell
"garbage" from "plaintext", it only has to stop. The cause is chained (`__cause__`) for operators, and
the message names the record (topic, partition, offset) when the caller knows them. Messages never
contain key material or payload bytes.
"""

from __future__ import annotations


class EncryptionError(Exception):
    """Base of every error raised by `encryption` (producer side: the record was not produced)."""


class KmsError(EncryptionError):
    """The key-management system refused or failed an operation."""


class KmsUnavailableError(KmsError):
    """A transient KMS failure (network, server error); retried with backoff before it is reported."""


class KeyNotFoundError(KmsError):
    """The named key-encryption key (or the requested version of it) does not exist."""


class UnwrapRateLimitedError(KmsError):
    """An unwrap refused without asking the KMS: the KEK's `UnwrapLimit` is spent for now (not remembered
    as a refusal: the same wrapped key is unwrapped once the limit allows)."""


class InsecureKeyRingError(KmsError):
    """The local key-ring file is readable or writable by others than its owner."""


class DecryptionError(EncryptionError):
    """A record could not be decrypted or verified; it is never returned as garbage or plaintext.

    `reason` says what failed in words safe to log; `topic`, `partition` and `offset` name the record
    when known (a plain confluent-kafka `SerializationContext` carries only the topic; use
    `DecryptingDeserializer.decrypt_message(msg)` or a `RecordContext` to get all three).
    Through confluent-kafka's `DeserializingConsumer.poll` it arrives wrapped in
    `ValueDeserializationError` / `KeyDeserializationError`: the error is `.exception`, the raw
    record (with partition and offset) is `.kafka_message`.
    """

    def __init__(
        self,
        reason: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = [
            f"{name}={value}"
            for name, value in (("topic", self.topic), ("partition", self.partition), ("offset", self.offset))
            if value is not None
        ]
        location = f" ({' '.join(where)})" if where else ""
        return f"cannot decrypt record{location}: {self.reason}"

    def located(self, *, topic: str | None, partition: int | None, offset: int | None) -> DecryptionError:
        """A copy naming the record's position (keeps what is already known)."""
        located = DecryptionError(
            self.reason,
            topic=self.topic if self.topic is not None else topic,
            partition=self.partition if self.partition is not None else partition,
            offset=self.offset if self.offset is not None else offset,
        )
        located.__cause__ = self.__cause__
        return located
