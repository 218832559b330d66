"""Findings of the adversarial cryptographic review (2026-11-22): each test failed on the code before its fix.

The attacker here can write to the topic (any bytes, any headers) and may hold some keys, but not the
ones the test says it lacks.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from encryption import (
    DecryptingDeserializer,
    DecryptionError,
    EncryptingSerializer,
    EncryptionError,
    InsecureKeyRingError,
    KmsError,
    LocalKms,
    RecordContext,
    RecordKeyDeserializer,
    RecordKeySerializer,
    Signer,
)
from encryption.datakeys import DataKeyCache
from encryption.fields import FieldDecryptingDeserializer, FieldEncryptingSerializer, FieldPolicy, FieldRule
from encryption.kms import WrappedKey
from encryption.reencrypt import Reencryptor


def _produce(kms: LocalKms, key: bytes, value: bytes, headers: list, **options: object) -> tuple:
    ctx = SerializationContext("orders", MessageField.KEY, headers)
    wire_key = RecordKeySerializer(kms, "orders")(key, ctx)
    ctx.field = MessageField.VALUE
    return wire_key, EncryptingSerializer(kms, "orders", **options)(value, ctx), headers  # type: ignore[arg-type]


# -- reencrypt: a signature is checked before it is replaced by the operator's -------------------------------


def test_reencryptor_does_not_launder_a_signature_it_did_not_check(kms: LocalKms) -> None:
    """A record signed by a key nobody trusts (here: a forged signature) must not come out of
    re-encryption signed by the operator's trusted key."""
    operator = Signer("ops", Ed25519PrivateKey.generate())
    mallory = Signer("p1", Ed25519PrivateKey.generate())  # claims the producer's key id, with her own key
    key, value, headers = _produce(kms, b"alice", b"pay mallory", [], signer=mallory)
    kms.rotate_key("orders")
    with pytest.raises(EncryptionError, match="trusted_signers"):
        Reencryptor(kms, "orders", signer=operator).rewrite("orders", key, value, headers)


# -- fields: the rule decides the algorithm and the KEK, never the ciphertext ---------------------------------

FIELD_SCHEMA = {"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": ["PII"]}}}


def test_a_deterministic_field_does_not_open_where_the_rule_is_randomized(kms: LocalKms) -> None:
    """Deterministic ciphertexts are not bound to the topic; a consumer whose rule says randomized
    (topic-bound) must not accept one, or any topic's deterministic `ssn` could be moved in."""
    joinable = FieldEncryptingSerializer(kms, "orders", FieldPolicy.from_json_schema(FIELD_SCHEMA,
                                                                                     deterministic_tags=["PII"]))
    moved = joinable({"ssn": "alice-ssn"}, SerializationContext("analytics", MessageField.VALUE, []))
    reader = FieldDecryptingDeserializer(kms, FieldPolicy.from_json_schema(FIELD_SCHEMA))
    with pytest.raises(DecryptionError, match="randomized"):
        reader(moved, SerializationContext("customers", MessageField.VALUE, []))


def test_a_randomized_field_does_not_open_where_the_rule_is_deterministic(kms: LocalKms) -> None:
    sealed = FieldEncryptingSerializer(kms, "orders", FieldPolicy.from_json_schema(FIELD_SCHEMA))(
        {"ssn": "alice-ssn"}, SerializationContext("customers", MessageField.VALUE, []))
    reader = FieldDecryptingDeserializer(kms, FieldPolicy.from_json_schema(FIELD_SCHEMA, deterministic_tags=["PII"]))
    with pytest.raises(DecryptionError, match="deterministic"):
        reader(sealed, SerializationContext("customers", MessageField.VALUE, []))


RULE_SET = {"domainRules": [{"name": "e", "type": "ENCRYPT", "tags": ["PII"], "params": {"encrypt.kek.name": "orders"}}]}


@pytest.mark.parametrize("deterministic", [False, True])
def test_a_field_under_another_kek_does_not_open_where_the_rule_names_its_kek(
    kms: LocalKms, deterministic: bool
) -> None:
    """Whoever holds another KEK the consumer's KMS also serves (`payments`) must not be able to write
    fields that a consumer whose rule says `encrypt.kek.name: orders` accepts."""
    kms.create_key("payments")
    tags = ["PII"] if deterministic else []
    forger = FieldEncryptingSerializer(kms, "payments", FieldPolicy.from_json_schema(FIELD_SCHEMA,
                                                                                     deterministic_tags=tags))
    forged = forger({"ssn": "mallory-ssn"}, SerializationContext("customers", MessageField.VALUE, []))
    policy = FieldPolicy.from_json_schema(FIELD_SCHEMA, rule_set=RULE_SET, deterministic_tags=tags)
    assert policy.rules[0].kek == "orders"
    with pytest.raises(DecryptionError, match="payments"):
        FieldDecryptingDeserializer(kms, policy)(forged, SerializationContext("customers", MessageField.VALUE, []))


# -- LocalKms: the key ring is never written through a file someone else prepared ----------------------------


def test_a_stale_world_readable_temporary_file_does_not_expose_the_key_ring(tmp_path: Path) -> None:
    ring = LocalKms(tmp_path / "ring.json")
    stale = tmp_path / f".ring.json.{os.getpid()}.tmp"  # the name a writer used before (e.g. after a crash)
    stale.write_text("")
    stale.chmod(0o644)
    ring.create_key("orders")
    assert stat.S_IMODE((tmp_path / "ring.json").stat().st_mode) == 0o600
    assert LocalKms(tmp_path / "ring.json").key_names() == ["orders"]


def test_the_key_ring_is_not_written_through_a_planted_symlink(tmp_path: Path) -> None:
    ring = LocalKms(tmp_path / "ring.json")
    planted = tmp_path / "attacker-readable"
    planted.write_text("")
    (tmp_path / f".ring.json.{os.getpid()}.tmp").symlink_to(planted)
    ring.create_key("orders")
    assert planted.read_text() == ""  # no key material went there
    assert not (tmp_path / "ring.json").is_symlink()
    assert ring.key_names() == ["orders"]


def test_a_symlink_planted_as_the_lock_file_is_refused(tmp_path: Path) -> None:
    ring = LocalKms(tmp_path / "ring.json")
    (tmp_path / "ring.json.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InsecureKeyRingError, match="lock file"):
        ring.create_key("orders")
    assert not (tmp_path / "elsewhere").exists()


# -- consumers name the KEKs they accept: a record under another KEK may come from whoever holds that one ----


def _forged_under_payments(kms: LocalKms, headers: list | None, *, hash_keys: bool = False) -> tuple[bytes | None, bytes | None]:
    """What a producer allowed to wrap under `payments` (not `orders`) can write to the orders topic."""
    kms.create_key("payments")
    ctx = SerializationContext("orders", MessageField.KEY, headers)
    key = RecordKeySerializer(kms, "payments", hash_keys=hash_keys)(b"alice", ctx)
    ctx.field = MessageField.VALUE
    return key, EncryptingSerializer(kms, "payments")(b"refund to mallory", ctx)


@pytest.mark.parametrize("headers", [[], None], ids=["header-form", "envelope-form"])
def test_a_value_under_a_kek_the_consumer_does_not_accept_is_refused(kms: LocalKms, headers: list | None) -> None:
    key, value = _forged_under_payments(kms, headers)
    reader = DecryptingDeserializer(kms, kek_names=["orders"])
    ctx = RecordContext("orders", MessageField.VALUE, headers, key=key)
    with pytest.raises(DecryptionError, match=r"'payments'.*kek_names"):
        reader(value, ctx)
    assert len(reader.cache) == 0  # refused before any unwrap
    # the same consumer reads the orders KEK's records, also through its inlined path (second record)
    for _ in range(2):
        good_headers: list = []
        _, good, _ = _produce(kms, b"alice", b"order", good_headers)
        assert reader(good, RecordContext("orders", MessageField.VALUE, good_headers, key=b"alice")) == b"order"
    # a consumer without kek_names sharing the cache unwraps the payments data key; still refused here
    assert DecryptingDeserializer(kms, cache=reader.cache)(value, ctx) == b"refund to mallory"
    with pytest.raises(DecryptionError, match="'payments'"):
        reader(value, ctx)


def test_a_protected_key_under_a_kek_the_consumer_does_not_accept_is_refused(kms: LocalKms) -> None:
    headers: list = []
    key, _ = _forged_under_payments(kms, headers, hash_keys=True)
    with pytest.raises(DecryptionError, match="'payments'"):
        RecordKeyDeserializer(kms, kek_names=["orders"])(key, SerializationContext("orders", MessageField.KEY, headers))


@pytest.mark.parametrize("deterministic", [False, True])
def test_a_field_under_a_kek_the_consumer_does_not_accept_is_refused(kms: LocalKms, deterministic: bool) -> None:
    kms.create_key("payments")
    policy = FieldPolicy.from_json_schema(FIELD_SCHEMA, deterministic_tags=["PII"] if deterministic else [])
    sent = SerializationContext("customers", MessageField.VALUE, [])
    forged = FieldEncryptingSerializer(kms, "payments", policy)({"ssn": "mallory-ssn"}, sent)
    reader = FieldDecryptingDeserializer(kms, policy, kek_names=["orders"])
    with pytest.raises(DecryptionError, match="'payments'"):
        reader(forged, sent)


def test_a_key_ring_owned_by_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ring someone else planted (mode 0600, so only its owner, or root, can read it) holds KEKs that
    someone knows: a process running as root must not adopt it, nor one running as another user."""
    LocalKms(tmp_path / "ring.json").create_key("orders")
    owner = (tmp_path / "ring.json").stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # this process is now someone else than the owner
    with pytest.raises(InsecureKeyRingError, match="owned by"):
        LocalKms(tmp_path / "ring.json")


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


@pytest.mark.parametrize("corrupt", ["current-is-material", "truncated-json"])
def test_a_corrupt_key_ring_error_carries_no_key_material_in_its_chain(tmp_path: Path, corrupt: str) -> None:
    """Error reporters print (and some keep) the whole exception chain with its attributes: none of it may
    hold a KEK. json's JSONDecodeError keeps the whole document (`.doc`); int() quotes what it could not read."""
    path = tmp_path / "ring.json"
    LocalKms(path).create_key("orders")
    text = path.read_text()
    material = json.loads(text)["keys"]["orders"]["versions"]["1"]["material"]
    if corrupt == "current-is-material":
        text = text.replace('"current": 1', f'"current": "{material}"')
    else:
        text = text[: text.index(material) + len(material) + 3]
    path.write_text(text)
    with pytest.raises(KmsError, match="corrupt") as info:
        LocalKms(path)
    for exc in _chain(info.value):
        assert material not in str(exc) and material not in repr(vars(exc) if hasattr(exc, "__dict__") else ())


# -- checked and sound (pinned so it stays so) ------------------------------------------------------------------


def test_with_trusted_signers_a_tombstone_must_be_signed_too(kms: LocalKms) -> None:
    producer = Signer("p1", Ed25519PrivateKey.generate())
    reader = DecryptingDeserializer(kms, trusted_signers={"p1": producer.private_key.public_key()})
    signed: list = []
    _produce(kms, b"alice", b"order", signed, signer=producer)
    tombstone_headers: list = []
    key, tombstone, _ = _produce(kms, b"alice", None, tombstone_headers, signer=producer)  # type: ignore[arg-type]
    assert reader(tombstone, RecordContext("orders", MessageField.VALUE, tombstone_headers, key=key)) is None
    with pytest.raises(DecryptionError, match="not signed"):  # anyone's unsigned delete
        reader(None, RecordContext("orders", MessageField.VALUE, [], key=key))
    with pytest.raises(DecryptionError, match="does not verify"):  # the order's signature on a delete
        reader(None, RecordContext("orders", MessageField.VALUE, [h for h in signed if h[0] == "kgov.sig"], key=key))



def test_a_field_that_does_not_decrypt_to_text_keeps_its_plaintext_out_of_the_error_chain(kms: LocalKms) -> None:
    """UnicodeDecodeError keeps the whole decrypted value (`.object`) and its message quotes a byte of it;
    chained, traceback printing and error reporters would write plaintext to logs."""
    ctx = SerializationContext("customers", MessageField.VALUE, [])
    as_bytes = FieldEncryptingSerializer(kms, "orders", FieldPolicy([FieldRule(("ssn",), "bytes", False)]))
    sealed = as_bytes({"ssn": b"\xe9-secret-ssn-078-05-1120"}, ctx)["ssn"]
    as_text = FieldDecryptingDeserializer(kms, FieldPolicy([FieldRule(("ssn",), "string", False)]))
    with pytest.raises(DecryptionError, match="does not decrypt to text") as info:
        as_text({"ssn": base64.b64encode(sealed).decode()}, ctx)
    for exc in _chain(info.value):
        assert "0xe9" not in str(exc) and b"secret" not in repr(getattr(exc, "object", b"")).encode()


# -- Vault: unwrapped data keys never cross the network in the clear ------------------------------------------


@pytest.mark.parametrize("url", ["http://vault.internal:8200", "http://10.0.0.5:8200", "ftp://vault.internal"])
def test_vault_over_plain_http_to_another_host_is_refused(url: str) -> None:
    """Every unwrap answer carries a data key in plaintext (base64), and every request the token."""
    import hvac

    from encryption.vault import VaultTransitKms

    with pytest.raises(KmsError, match="https"):
        VaultTransitKms(url=url, token="s.token")
    with pytest.raises(KmsError, match="https"):
        VaultTransitKms(hvac.Client(url=url, token="s.token"))
    if url.startswith("http:"):
        VaultTransitKms(url=url, token="s.token", allow_http=True)  # a network the operator vouches for
    else:
        with pytest.raises(KmsError, match="https"):
            VaultTransitKms(url=url, token="s.token", allow_http=True)


@pytest.mark.parametrize("url", ["https://vault.internal:8200", "http://127.0.0.1:8200", "http://[::1]:8200",
                                 "http://localhost:8200"])
def test_vault_over_https_or_loopback_is_accepted(url: str) -> None:
    from encryption.vault import VaultTransitKms

    assert VaultTransitKms(url=url, token="s.token").mount_point == "transit"


# -- revoking a consumer's access to a KEK takes effect within the cache's time-to-live, for every field ------


class _RevocableKms:
    """A real LocalKms whose operator can take this consumer's access away (as a Vault policy change)."""

    def __init__(self, inner: LocalKms) -> None:
        self.inner = inner
        self.revoked = False

    def _check(self) -> None:
        if self.revoked:
            raise KmsError("permission denied")

    def unwrap(self, wrapped: WrappedKey) -> bytes:
        self._check()
        return self.inner.unwrap(wrapped)

    def derived_secret(self, key_name: str, label: bytes) -> bytes:
        self._check()
        return self.inner.derived_secret(key_name, label)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.mark.parametrize("deterministic", [False, True])
def test_a_revoked_consumer_stops_reading_fields_after_the_cache_ttl(kms: LocalKms, deterministic: bool) -> None:
    policy = FieldPolicy.from_json_schema(FIELD_SCHEMA, deterministic_tags=["PII"] if deterministic else [])
    ctx = SerializationContext("customers", MessageField.VALUE, [])
    sealed = FieldEncryptingSerializer(kms, "orders", policy)({"ssn": "alice-ssn"}, ctx)
    clock = [0.0]
    revocable = _RevocableKms(kms)
    cache = DataKeyCache(revocable, ttl_seconds=600, now=lambda: clock[0])  # type: ignore[arg-type]
    reader = FieldDecryptingDeserializer(revocable, policy, cache=cache)  # type: ignore[arg-type]
    assert reader(sealed, ctx) == {"ssn": "alice-ssn"}
    revocable.revoked = True
    clock[0] = 599.0
    assert reader(sealed, ctx) == {"ssn": "alice-ssn"}  # within the TTL: cached, as documented
    clock[0] = 601.0
    with pytest.raises(DecryptionError):
        reader(sealed, ctx)


class _OddVault:
    """An hvac client whose Transit answers are not what Vault documents (a proxy, a bug, an impostor)."""

    url = "https://vault.invalid"

    def __init__(self, answer: object) -> None:
        self.answer = answer
        transit = type("Transit", (), {})()
        transit.read_key = lambda name, mount_point: {"data": {"latest_version": 1}}
        transit.decrypt_data = lambda name, ciphertext, mount_point: self.answer
        transit.generate_hmac = lambda name, **options: self.answer
        self.secrets = type("Secrets", (), {"transit": transit})()


@pytest.mark.parametrize("answer", [{"data": {"plaintext": "not base64!"}}, {"data": {}}, {"errors": []}, None])
def test_an_odd_vault_answer_is_a_kms_error_and_a_decryption_error_for_the_consumer(kms: LocalKms, answer: object) -> None:
    from encryption.vault import VaultTransitKms

    vault = VaultTransitKms(_OddVault(answer))  # type: ignore[arg-type]
    with pytest.raises(KmsError, match="Vault answered"):
        vault.unwrap(WrappedKey("orders", 1, b"vault:v1:QUFBQQ=="))
    with pytest.raises(KmsError, match="Vault answered"):
        vault.derived_secret("orders", b"label")
    header = b"\x01\x00\x06orders" + (1).to_bytes(4, "big") + (17).to_bytes(2, "big") + b"vault:v1:QUFBQQ==" + b"\0" * 12
    with pytest.raises(DecryptionError, match="Vault answered"):
        DecryptingDeserializer(vault)(b"x" * 32, SerializationContext("orders", MessageField.VALUE, [("kgov.enc", header)]))
