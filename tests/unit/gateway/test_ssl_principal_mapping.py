"""ssl.principal.mapping.rules as Kafka's SslPrincipalMapper: its test vectors (SslPrincipalMapperTest),
and our Java-regex translation checked against a JDK's java.util.regex at test time."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from gateway.ssl_principal_mapping import (
    NoMatchingRule,
    SslPrincipalMappingError,
    kafka_escaped_replacement,
    parse_rules,
)


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_kafka_valid_rules(rules: str) -> None:
    assert parse_rules(rules).rules


@pytest.mark.parametrize(("rules", "message"), [
    ("default", "Invalid rule: `default`, unmatched substring: `default`"),
    ("DEFAUL", "Invalid rule: `DEFAUL`, unmatched substring: `DEFAUL`"),
    ("DEFAULT/L", "Invalid rule: `DEFAULT/L`, unmatched substring: `/L`"),
    ("DEFAULT/U", "Invalid rule: `DEFAULT/U`, unmatched substring: `/U`"),
    ("RULE:CN=(.*?),OU=ServiceUsers.*/$1", "unmatched substring"),
    ("rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "unmatched substring"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U", "unmatched substring: `/U`"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "unmatched substring"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/U", "unmatched substring"),
    # the splitter finds no whole RULE, so the first comma ends this one (Kafka's own splitting)
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/LU", "Invalid rule: `RULE:^CN=(.*?)`, unmatched substring: `RULE:^CN=(.*?)`"),
])
def test_kafka_invalid_rules(rules: str, message: str) -> None:
    with pytest.raises(SslPrincipalMappingError, match=r"^Invalid rule") as info:
        parse_rules(rules)
    assert message in str(info.value)


def test_kafka_mapper_vectors() -> None:
    mapper = parse_rules(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize(("expected", "rules"), [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_kafka_rules_splitting(expected: str, rules: str) -> None:
    assert str(parse_rules(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_kafka_comma_with_whitespace() -> None:
    mapper = parse_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_unset_rules_are_default_and_no_match_fails() -> None:
    assert parse_rules(None).name("CN=a,O=b") == "CN=a,O=b"
    assert parse_rules(None).name("") == ""  # an empty subject: Kafka's principal is `User:` (empty name)
    mapper = parse_rules("RULE:^CN=([a-z]+)$/$1/")
    assert mapper.name("CN=alice") == "alice"
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=Alice,O=x, rules \\[RULE:\\^CN=\\(\\[a-z\\]\\+\\)\\$/\\$1\\]"):
        mapper.name("CN=Alice,O=x")
    with pytest.raises(NoMatchingRule):
        parse_rules("").name("CN=a")  # no rules at all: nothing maps


def test_replacement_back_references_as_kafka_escapes_them() -> None:
    # beyond the groups: literal (Kafka's escapeLiteralBackReferences), $12 with one group is $1 then "2"
    assert parse_rules("RULE:^CN=(.*)$/$1@$4/").name("CN=x") == "x@$4"
    assert parse_rules("RULE:^CN=(.*)$/$12/").name("CN=x") == "x2"
    assert parse_rules("RULE:^CN=(.*)$/[$0]/").name("CN=x") == "[CN=x]"
    assert parse_rules("RULE:^CN=(a)?(.*)$/<$1>$2/").name("CN=x") == "<>x"  # an unmatched group is empty
    assert parse_rules("RULE:^CN=(.*)$/\\$1 costs \\\\/").name("CN=x") == "$1 costs \\"
    # Kafka's insertion drifts after the first: the second escape lands before the `6`, which stays a reference
    assert kafka_escaped_replacement("$5$6", 1) == "\\$5\\$6"[:0] + "\\$5$\\6"[:0] + "\\$\\5$6"
    with pytest.raises(SslPrincipalMappingError, match="names group 6, but the pattern has 1"):
        parse_rules("RULE:^CN=(.*)$/$5$6/")


@pytest.mark.parametrize(("rules", "message"), [
    ("RULE:^CN=.*$/$1/", "names group 1, but the pattern has 0"),  # Java: IndexOutOfBounds at every match
    ("RULE:^CN=(.*)$/$x/", "`$` without a group number"),
    ("RULE:(?i)cn=(.*)/$1/", "inline flags"),
    ("RULE:^CN=\\p{Lu}.*$/x/", "\\p{...}"),
    ("RULE:^CN=\\bx.*$/x/", "word boundary"),
    ("RULE:^CN=\\Qa.b\\E$/x/", "quoting"),
    ("RULE:^CN=[a[b]]$/x/", "class inside a class"),
    ("RULE:^CN=[a-z&&[^b]]$/x/", "intersection"),
    ("RULE:^CN=(?<n>.*)$/x/", "named groups"),
    ("RULE:^CN=(?P<n>.*)$/x/", "Python-only"),
    ("RULE:^CN=x{,2}$/x/", "not a quantifier"),
    ("RULE:^CN=(x|{2})$/x/", "not a quantifier"),
    ("RULE:^CN=\\11$/x/", "followed by a digit"),
    ("RULE:^CN=\\uD83D\\uDE00$/x/", "surrogates"),
    ("RULE:^CN=(?<=a+)x$/x/", "Invalid rule pattern"),  # variable-length look-behind: Python's own refusal
    ("RULE:^CN=(.*$/x/", "Invalid rule pattern"),
])
def test_untranslatable_or_broken_rules_are_refused_at_start(rules: str, message: str) -> None:
    with pytest.raises(SslPrincipalMappingError) as info:
        parse_rules(rules)
    assert message in str(info.value)


def test_case_options_use_english_case_mapping() -> None:
    assert parse_rules("RULE:^CN=(.*)$/$1/U").name("CN=stra\u00dfe") == "STRASSE"
    assert parse_rules("RULE:^CN=(.*)$/$1/L").name("CN=\u0130I") == "i\u0307i"


# Java's regex reads these patterns differently from Python's unless translated: `.` and `$` with line
# terminators, \d \w \s and (?i) on non-ASCII, quantifiers, look-arounds, replaceAll's empty matches.
PATTERNS = [
    "^CN=(.*)$", "^CN=(.*?),.*$", "(.*)", ".*", "x*", "^(.*)\\Z", "^(.*)\\z", "CN=([^,]*)(,.*|$)",
    "^CN=(\\w+).*$", "^CN=(\\d+)(.*)$", "^CN=(\\s*)(\\S*)(.*)$", "^(?:CN|UID)=([a-z]+)(?=,|$).*",
    "^.*?(a|b)+.*$", "^(.)(.)?.*$", "(?>CN=)(.*)", "^CN=a*+(.*)$", "([^a]*)a?(.*)", "(?!x)(.*)",
    "^.{0,3}(.*)$", "^CN=(.*)\\r\\n$", "^CN=(.*)$\\n", "[\\s\\S]*", "(.*)$(.*)",
]
REPLACEMENTS = ["$1", "<$1>", "$0$0", "-", "$1$2", "\\$1", "$12", ""]


def random_dn(rng: random.Random) -> str:
    alphabet = "CN=,ab1 \r\n\u0085\u2028\u2029\u00e9\u0661_\u00a0x\\"
    dn = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
    return rng.choice(["", "CN=", "CN=a", "UID="]) + dn + rng.choice(["", "", "\n", "\r\n", "\r", "\u2028", ","])


JAVA_REGEX = """
import java.util.HexFormat;
import java.util.regex.*;
public class Rx {
    static String dec(String hex) { return new String(HexFormat.of().parseHex(hex), java.nio.charset.StandardCharsets.UTF_16BE); }
    static String enc(String s) { return HexFormat.of().formatHex(s.getBytes(java.nio.charset.StandardCharsets.UTF_16BE)); }
    public static void main(String[] args) throws Exception {
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.split(" ", -1);
            String p = dec(f[0]), r = dec(f[1]), dn = dec(f[2]);
            System.out.println(Pattern.compile(p).matcher(dn).matches() ? "=" + enc(dn.replaceAll(p, r)) : "-");
        }
    }
}
"""


def test_translated_patterns_match_and_replace_as_java_does(tmp_path: Path) -> None:
    rng = random.Random(371)
    cases = []
    for pattern in PATTERNS:
        for _ in range(100):
            cases.append((pattern, rng.choice(REPLACEMENTS), random_dn(rng)))
    rules = {}
    for pattern, replacement, _ in cases:
        if (pattern, replacement) not in rules:
            try:
                # written as is: the rule parser keeps escapes for the regex and the replacement to read
                rules[pattern, replacement] = parse_rules(f"RULE:{pattern}/{replacement}/").rules[0]
            except SslPrincipalMappingError:
                rules[pattern, replacement] = None  # e.g. $2 with one group: refused at start
    runnable = [(p, r, dn) for p, r, dn in cases if rules[p, r] is not None]
    assert len(runnable) > 1000

    def enc(s: str) -> str:
        return s.encode("utf-16-be").hex()

    source = tmp_path / "Rx.java"
    source.write_text(JAVA_REGEX)
    lines = [f"{enc(p)} {enc(kafka_escaped_replacement(r, rules[p, r].pattern.groups))} {enc(dn)}"  # type: ignore[union-attr]
             for p, r, dn in runnable]
    out = subprocess.run(["java", str(source)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()
    assert len(out) == len(runnable)
    matched = 0
    for (p, r, dn), java in zip(runnable, out, strict=True):
        want = None if java == "-" else bytes.fromhex(java[1:]).decode("utf-16-be")
        rule = rules[p, r]
        assert rule is not None
        assert rule.apply(dn) == want, (p, r, dn)
        matched += want is not None
    assert matched > 250


JAVA_CASE = """
public class Case {
    public static void main(String[] args) throws Exception {
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            String s = new String(java.util.HexFormat.of().parseHex(line), java.nio.charset.StandardCharsets.UTF_16BE);
            StringBuilder o = new StringBuilder();
            for (String t : new String[] {s.toLowerCase(java.util.Locale.ENGLISH), s.toUpperCase(java.util.Locale.ENGLISH)})
                o.append(java.util.HexFormat.of().formatHex(t.getBytes(java.nio.charset.StandardCharsets.UTF_16BE))).append(" ");
            System.out.println(o.toString().trim());
        }
    }
}
"""


def test_l_and_u_case_results_as_java_english_locale(tmp_path: Path) -> None:
    names = ["\u0130I", "stra\u00dfe", "\u03a3\u0391\u03a3 \u03a3", "\u01c5", "\ufb01", "\u2126", "\u1e9e", "\u0149",
             "A\u03a3\u0301 x", "\u00b5", "\u0345", "CN=J\u00fcrgen,O=\u00c6r\u00f8"]
    source = tmp_path / "Case.java"
    source.write_text(JAVA_CASE)
    out = subprocess.run(["java", str(source)], input="\n".join(n.encode("utf-16-be").hex() for n in names) + "\n",
                         capture_output=True, text=True, check=True, timeout=120).stdout.splitlines()
    lower, upper = parse_rules("RULE:(.*)/$1/L"), parse_rules("RULE:(.*)/$1/U")
    for dn, java in zip(names, out, strict=True):
        want_lower, want_upper = (bytes.fromhex(h).decode("utf-16-be") for h in java.split(" "))
        assert (lower.name(dn), upper.name(dn)) == (want_lower, want_upper)
