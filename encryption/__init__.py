"""End-to-end encryption for Kafka records: envelope encryption with a KMS, encrypting serdes,
key rotation, protected keys, signatures and field-level encryption.

Public interface (stable): `LocalKms`, `EncryptingSerializer`, `DecryptingDeserializer`,
`DecryptionError`; the rest is importable from here as well.
"""

from encryption.datakeys import DataKeyCache, DataKeyIssuer, DataKeyPolicy
from encryption.errors import (
    DecryptionError,
    EncryptionError,
    InsecureKeyRingError,
    KeyNotFoundError,
    KmsError,
    KmsUnavailableError,
)
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy
from encryption.kms import Kms, LocalKms, WrappedKey
from encryption.reencrypt import ReencryptionReport, Reencryptor, reencrypt_topic
from encryption.retry import RetryPolicy
from encryption.serdes import (
    DecryptingDeserializer,
    EncryptingSerializer,
    RecordContext,
    RecordKeyDeserializer,
    RecordKeySerializer,
)
from encryption.signing import Signer

__all__ = [
    "DataKeyCache",
    "DataKeyIssuer",
    "DataKeyPolicy",
    "DecryptingDeserializer",
    "DecryptionError",
    "EncryptingSerializer",
    "EncryptionError",
    "FieldDecryptingDeserializer",
    "FieldEncryptingSerializer",
    "FieldPolicy",
    "InsecureKeyRingError",
    "KeyNotFoundError",
    "Kms",
    "KmsError",
    "KmsUnavailableError",
    "LocalKms",
    "RecordContext",
    "RecordKeyDeserializer",
    "RecordKeySerializer",
    "ReencryptionReport",
    "Reencryptor",
    "RetryPolicy",
    "Signer",
    "WrappedKey",
    "reencrypt_topic",
]
