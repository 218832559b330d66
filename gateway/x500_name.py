"""A certificate's subject as Java's `X500Principal.getName()` writes it (RFC 2253 form), from DER.

Kafka's DefaultKafkaPrincipalBuilder names an SSL client `User:<peerPrincipal.getName()>` (after
`ssl.principal.mapping.rules`), so ACLs written for a Kafka cluster hold DNs in the JDK's spelling. We
follow OpenJDK's `sun.security.x509.AVA.toRFC2253String` and `RDN`/`X500Name.getRFC2253Name`, checked
against a JDK 17 at test time (tests/unit/gateway/test_x500_name.py):

- RDNs most specific first (the reverse of their DER order); the AVAs of a multi-valued RDN joined by `+`
  in their DER order (non-canonical form: not sorted).
- Only CN, C, L, ST, O, OU, STREET, DC and UID are written by keyword. Every other attribute (emailAddress,
  serialNumber, title, ...) is its dotted OID with `#` and the value's whole DER encoding in lower-case hex.
- A value of another type than PrintableString, TeletexString, IA5String, GeneralString, BMPString or
  UTF8String is written the same `#`-hex way, even under a keyword.
- Those string values are their content bytes read as UTF-8 whatever the string type (the JDK does so:
  a BMPString's NUL bytes appear as `\\00`, a TeletexString's Latin-1 bytes as U+FFFD), then
  `,=+<>#;"\\` are escaped with a backslash everywhere in the value, NUL as `\\00`, and leading and
  trailing spaces and carriage returns with a backslash. Other characters, non-ASCII or control ones, are
  written as they are.

Python's `getpeercert()` dict cannot give this: it decodes the value per type and loses the DER.
"""

from __future__ import annotations

_OID_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# DER universal tags the JDK writes as strings (AVA.isDerString, non-canonical).
_STRING_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})  # Printable, T61, IA5, General, BMP, UTF8
_ESCAPED = frozenset(',=+<>#;"\\')
_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06


class CertificateNameError(ValueError):
    """The certificate or its subject is not DER the JDK would read."""


def _read_tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at `pos`."""
    if pos + 2 > len(data):
        raise CertificateNameError("truncated DER element")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise CertificateNameError("high-tag-number DER element")
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise CertificateNameError("bad DER length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise CertificateNameError("truncated DER element")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, content start, content end) of each element in data[start:end]."""
    out = []
    pos = start
    while pos < end:
        tag, cstart, cend = _read_tlv(data, pos)
        if cend > end:
            raise CertificateNameError("DER element overruns its parent")
        out.append((tag, pos, cstart, cend))
        pos = cend
    return out


def _oid_string(content: bytes) -> str:
    if not content or content[-1] & 0x80:
        raise CertificateNameError("bad OID")
    arcs: list[int] = []
    value = 0
    for b in content:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    first = arcs[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(str(a) for a in head + arcs[1:])


def _escape_value(text: str) -> str:
    chars: list[str] = []
    for c in text:
        if c in _ESCAPED:
            chars.append("\\")
            chars.append(c)
        elif c == "\0":
            chars.extend("\\00")
        else:
            chars.append(c)
    # Leading and trailing spaces/CRs of the already escaped value get a backslash each (the JDK's order).
    lead = 0
    while lead < len(chars) and chars[lead] in " \r":
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in " \r":
        trail -= 1
    return "".join("\\" + c if i < lead or i > trail else c for i, c in enumerate(chars))


def _ava(data: bytes, start: int, end: int) -> str:
    parts = _children(data, start, end)
    if len(parts) != 2 or parts[0][0] != _OID:
        raise CertificateNameError("bad AttributeTypeAndValue")
    oid = _oid_string(data[parts[0][2]:parts[0][3]])
    tag, vstart, cstart, cend = parts[1]
    keyword = _OID_KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{data[vstart:cend].hex()}"
    return f"{keyword}={_escape_value(data[cstart:cend].decode('utf-8', 'replace'))}"


def rfc2253_from_name(name_der: bytes) -> str:
    """The DER `Name` (SEQUENCE OF RelativeDistinguishedName) as X500Principal.getName() writes it."""
    tag, start, end = _read_tlv(name_der, 0)
    if tag != _SEQUENCE or end != len(name_der):
        raise CertificateNameError("a Name is one DER SEQUENCE")
    rdns = []
    for rtag, _, rstart, rend in _children(name_der, start, end):
        avas = _children(name_der, rstart, rend)
        if rtag != _SET or not avas or any(a[0] != _SEQUENCE for a in avas):
            raise CertificateNameError("bad RelativeDistinguishedName")
        rdns.append("+".join(_ava(name_der, a[2], a[3]) for a in avas))
    return ",".join(reversed(rdns))


def subject_name_der(cert_der: bytes) -> bytes:
    """The subject `Name` of a DER certificate, as its bytes stand (not re-encoded)."""
    tag, start, end = _read_tlv(cert_der, 0)
    if tag != _SEQUENCE:
        raise CertificateNameError("a certificate is a DER SEQUENCE")
    certificate = _children(cert_der, start, end)
    if not certificate or certificate[0][0] != _SEQUENCE:
        raise CertificateNameError("certificate without tbsCertificate")
    tbs = _children(cert_der, certificate[0][2], certificate[0][3])
    fields = tbs[1:] if tbs and tbs[0][0] == 0xA0 else tbs  # [0] version is optional
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4][0] != _SEQUENCE:
        raise CertificateNameError("certificate without subject")
    _, elem, _, cend = fields[4]
    return cert_der[elem:cend]


def certificate_subject(cert_der: bytes) -> str:
    """The certificate's subject as Kafka's principal builder sees it before its mapping rules."""
    return rfc2253_from_name(subject_name_der(cert_der))
