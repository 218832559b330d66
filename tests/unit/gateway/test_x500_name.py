"""Certificate subjects as Java's X500Principal.getName() writes them: fixed vectors, and the same names
given to a JDK at test time (the differential test runs a ten-line Java program with `java`)."""

from __future__ import annotations

import datetime
import random
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.x500_name import CertificateNameError, certificate_subject, rfc2253_from_name

PRINTABLE, T61, IA5, UNIVERSAL, BMP, UTF8, VISIBLE, NUMERIC = 0x13, 0x14, 0x16, 0x1C, 0x1E, 0x0C, 0x1A, 0x12
CN, ORG, OU, C, EMAIL, UID, DC, TITLE, SERIAL = ("2.5.4.3", "2.5.4.10", "2.5.4.11", "2.5.4.6", "1.2.840.113549.1.9.1",
                                              "0.9.2342.19200300.100.1.1", "0.9.2342.19200300.100.1.25",
                                              "2.5.4.12", "2.5.4.5")


def tlv(tag: int, content: bytes) -> bytes:
    n = len(content)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | 2]) + n.to_bytes(2, "big")
    return bytes([tag]) + length + content


def oid(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    out = bytearray([arcs[0] * 40 + arcs[1]])
    for arc in arcs[2:]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        out.extend(reversed(chunk))
    return tlv(0x06, bytes(out))


def name(*rdns: list[tuple[str, int, bytes]]) -> bytes:
    """A DER Name from RDNs in DER order (least specific first), each a list of (oid, tag, content)."""
    return tlv(0x30, b"".join(tlv(0x31, b"".join(tlv(0x30, oid(o) + tlv(t, v)) for o, t, v in rdn))
                              for rdn in rdns))


def utf8(o: str, text: str) -> list[tuple[str, int, bytes]]:
    return [(o, UTF8, text.encode())]


VECTORS: list[tuple[bytes, str]] = [
    (name(utf8(C, "DE"), utf8(ORG, "kgov"), utf8(OU, "eng"), utf8(CN, "alice")), "CN=alice,OU=eng,O=kgov,C=DE"),
    # multi-valued RDN: DER order kept, not sorted
    (name(utf8(ORG, "Acme, Inc."), [(UID, UTF8, b"#1 "), (CN, UTF8, b"a+b")]), "UID=\\#1\\ +CN=a\\+b,O=Acme\\, Inc."),
    # '#' is escaped everywhere, not only in front; leading and trailing blanks each get a backslash
    (name(utf8(CN, "  a#b;c<d>e=f\"g\\h  ")), 'CN=\\ \\ a\\#b\\;c\\<d\\>e\\=f\\"g\\\\h\\ \\ '),
    # emailAddress, title, serialNumber: not RFC 2253 keywords, so OID=#hex of the DER value
    (name(utf8(CN, "bob"), [(EMAIL, IA5, b"bob@example.com")]), "1.2.840.113549.1.9.1=#160f626f62406578616d706c652e636f6d,CN=bob"),
    (name([(TITLE, PRINTABLE, b"x")], [(SERIAL, PRINTABLE, b"42")]), "2.5.4.5=#13023432,2.5.4.12=#130178"),
    (name([(DC, IA5, b"com")], [(DC, IA5, b"example")], [(UID, UTF8, b"u1")]), "UID=u1,DC=example,DC=com"),
    # string types: PrintableString/IA5 as text; BMPString's bytes read as UTF-8 (NULs become \00)
    (name([(CN, PRINTABLE, b"p q")]), "CN=p q"),
    (name([(CN, BMP, "ab".encode("utf-16-be"))]), "CN=\\00a\\00b"),
    # a TeletexString's Latin-1 byte is not UTF-8: the JDK writes U+FFFD
    (name([(CN, T61, "caf\u00e9".encode("latin-1"))]), "CN=caf\ufffd"),
    (name(utf8(CN, "J\u00fcrgen \u4e2d\u6587")), "CN=J\u00fcrgen \u4e2d\u6587"),
    # control characters are written as they are; a trailing CR is escaped
    (name(utf8(CN, "a\tb\r")), "CN=a\tb\\\r"),
    # types the JDK does not read as strings: #hex even under a keyword
    (name([(CN, UNIVERSAL, "x".encode("utf-32-be"))]), "CN=#1c0400000078"),
    (name([(CN, VISIBLE, b"v")]), "CN=#1a0176"),
    (name(), ""),
    # an overlong UTF-8 sequence: one U+FFFD per byte, as Java's decoder
    (name([(CN, UTF8, bytes.fromhex("c0af"))]), "CN=\ufffd\ufffd"),
]


@pytest.mark.parametrize(("der", "expected"), VECTORS)
def test_fixed_vectors(der: bytes, expected: str) -> None:
    assert rfc2253_from_name(der) == expected


def random_name(rng: random.Random) -> bytes:
    alphabet = ' ,=+<>#;"\\\r\n\t\0aZ9-_.@\u00e9\u4e2d\U0001f600'
    rdns = []
    for _ in range(rng.randint(0, 4)):
        rdn = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
            tag = rng.choice([UTF8, UTF8, PRINTABLE, IA5, BMP, T61, UNIVERSAL, VISIBLE, NUMERIC])
            raw = (text.encode("utf-16-be", "surrogatepass") if tag == BMP else text.encode("utf-32-be")
                   if tag == UNIVERSAL else text.encode("latin-1", "replace") if tag == T61 else text.encode())
            if rng.random() < 0.1:
                raw = bytes(rng.randrange(256) for _ in range(rng.randint(1, 5)))  # not valid in any encoding
            rdn.append((rng.choice([CN, ORG, OU, C, EMAIL, UID, DC, TITLE, SERIAL, "2.5.4.7", "2.5.4.8", "2.5.4.9",
                                    "1.3.6.1.4.1.99999.1"]), tag, raw))
        rdns.append(rdn)
    return name(*rdns)


JAVA_NAMES = """
import java.io.*;
import javax.security.auth.x500.X500Principal;
public class Names {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            StringBuilder out = new StringBuilder("=");
            try {
                for (char c : new X500Principal(java.util.HexFormat.of().parseHex(line)).getName().toCharArray())
                    out.append(String.format("%04x", (int) c));
            } catch (IllegalArgumentException e) { out = new StringBuilder("ERR"); }
            System.out.println(out);
        }
    }
}
"""


def java_names(ders: list[bytes], tmp: Path) -> list[str | None]:
    """X500Principal(der).getName() for each name, by the JDK (None where it refuses the name)."""
    source = tmp / "Names.java"
    source.write_text(JAVA_NAMES)
    out = subprocess.run(["java", str(source)], input="\n".join(d.hex() for d in ders) + "\n",
                         capture_output=True, text=True, check=True, timeout=120).stdout.splitlines()
    return [None if line == "ERR" else bytes.fromhex(line[1:]).decode("utf-16-be", "surrogatepass") for line in out]


def test_same_names_as_the_jdk(tmp_path: Path) -> None:
    rng = random.Random(2253)
    ders = [d for d, _ in VECTORS] + MALFORMED + [random_name(rng) for _ in range(1500)]
    expected = java_names(ders, tmp_path)
    assert len(expected) == len(ders)
    assert expected[len(VECTORS):len(VECTORS) + len(MALFORMED)] == [None] * len(MALFORMED)  # the JDK refuses them too
    for der, want in zip(ders, expected, strict=True):
        if want is None:
            with pytest.raises(CertificateNameError):
                rfc2253_from_name(der)
        else:
            assert rfc2253_from_name(der) == want, der.hex()


def test_subject_is_read_from_the_certificate_der() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Sun Microsystems"),
                         x509.NameAttribute(NameOID.EMAIL_ADDRESS, "duke@sun.com"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "Duke")])
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "issuer")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(7).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    der = cert.public_bytes(serialization.Encoding.DER)
    assert certificate_subject(der) == "CN=Duke,1.2.840.113549.1.9.1=#160c64756b654073756e2e636f6d,O=Sun Microsystems,C=US"


# Refused by the JDK as by us (the differential test checks it).
MALFORMED = [b"\x30", b"\x30\x05\x31\x00", bytes.fromhex("300231ff"), bytes.fromhex("3009310730050603550403"),
             bytes.fromhex("30073105300306012a"), bytes.fromhex("300c300a300806035504030c0161")]


# The JDK reads a Name tagged SET, and ignores bytes after it; we do not. Neither can reach us: the
# subject comes out of a certificate OpenSSL has parsed as DER, cut at its own length (`subject_name_der`).
@pytest.mark.parametrize("der", [b"", *MALFORMED, b"\x31\x00", b"\x30\x02\x31\x00\x00"])
def test_malformed_names_are_refused(der: bytes) -> None:
    with pytest.raises(CertificateNameError):
        rfc2253_from_name(der)
