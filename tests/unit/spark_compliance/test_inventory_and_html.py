"""Inventory and classification parsing, the HTML page's escaping, the generator's determinism (pure)."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from spark_compliance import generator, html_report
from spark_compliance.inventory import InventoryError, parse_classification, parse_inventory


def test_inventory_export_is_read_with_defaults() -> None:
    acls, bindings, supers, cluster, exported = parse_inventory({
        "exported_at": "2024-05-01T00:00:00Z", "cluster_id": "c1",
        "acls": [{"resource_type": "topic", "resource_name": "orders", "principal": "User:CN=a, O=b",
                  "operation": "read"}],
        "role_bindings": [{"principal": "Group:sales", "role": "DeveloperRead", "resource_type": None,
                           "resource_name": None, "pattern_type": None}],
        "super_users": ["User:admin"]})
    assert acls == [("TOPIC", "orders", "LITERAL", "User:CN=a, O=b", "*", "READ", "ALLOW")]
    assert bindings == [("Group:sales", "DeveloperRead", None, None, None)]
    assert (supers, cluster, exported) == (("User:admin",), "c1", "2024-05-01T00:00:00Z")


@pytest.mark.parametrize(("doc", "message"), [
    ([], "expected a JSON object"),
    ({"acls": [{"resource_type": "TOPIC"}]}, "acls[0]: resource_type, resource_name, principal and operation"),
    ({"acls": [{"resource_type": 1, "resource_name": "x", "principal": "User:a", "operation": "READ"}]},
     "'resource_type' must be a string"),
    ({"role_bindings": [{"role": "x"}]}, "role_bindings[0]: principal and role are required"),
    ({"super_users": "User:admin"}, "'super_users' must be a list"),
])
def test_inventory_errors_name_the_field(doc: object, message: str) -> None:
    with pytest.raises(InventoryError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_inventory(doc)


def test_classification_topics_and_registry_subjects() -> None:
    rows = parse_classification({
        "topics": [{"name": "payments.", "pattern_type": "prefixed", "classes": ["pci"],
                    "approved_principals": ["User:billing"]}],
        "subjects": [{"subject": "patients-value", "tags": ["PHI"]}, {"subject": "people-key", "tags": ["pii"]}]})
    assert rows == [("payments.", "PREFIXED", ["PCI"], ["User:billing"]), ("patients", "LITERAL", ["PHI"], []),
                    ("people", "LITERAL", ["PII"], [])]
    with pytest.raises(InventoryError, match="pattern_type must be LITERAL or PREFIXED"):
        parse_classification({"topics": [{"name": "x", "pattern_type": "MATCH"}]})


def test_report_escapes_everything_from_the_logs() -> None:
    evil = "<script>alert(1)</script>"
    page = html_report.render(
        summary={"period": {"start": "a", "end": "b"}, "inputs": [evil], "line_quality": [
            {"source": evil, "kind": "bad", "lines": 1}], "bad_line_sample": [{"source": "s", "reason": "r", "raw": evil}]},
        findings=[{"rule": "NEW_PRINCIPAL", "severity": "MEDIUM", "principal": f"User:{evil}", "host": evil,
                   "resource": evil, "count": 1, "first_seen": None, "last_seen": None, "evidence": [evil],
                   "regulations": ["SOC 2 CC6.2"]}],
        charts={"denials": [("04-01 10:00", 3.0)], "top_principals": [(evil, 5.0)],
                "access_heat": [(0, 10, 4.0)], "volume": [(evil, 2048.0)]})
    assert "<script" not in page and "&lt;script&gt;" in page
    assert page.count("<svg") == 4 and "2.0 KiB" in page


def test_generator_is_deterministic_and_plants_every_rule(tmp_path: Path) -> None:
    a = generator.generate(tmp_path / "a", generator.MIN_LINES, 5)
    b = generator.generate(tmp_path / "b", generator.MIN_LINES, 5)
    assert a == b
    for f in ("logs/broker-1/kafka-authorizer.log", "logs/broker-4/kafka-request.log", "logs/gateway-1/events.jsonl",
              "inventory.json", "classification.json", "planted.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    planted = json.loads((tmp_path / "a" / "planted.json").read_text())
    assert {p["rule"] for p in planted} == set(generator_rules())
    assert all(set(p) == {"rule", "principal", "host", "resource"} for p in planted)
    total = sum(len(f.read_bytes().splitlines()) for f in (tmp_path / "a" / "logs").rglob("*") if f.is_file())
    assert abs(total - generator.MIN_LINES) < generator.MIN_LINES * 0.02
    with pytest.raises(ValueError, match="at least"):
        generator.generate(tmp_path / "c", 10, 1)


def generator_rules() -> tuple[str, ...]:
    from spark_compliance.findings import RULES

    return RULES


@pytest.mark.parametrize("seed", [3, 5])
def test_the_off_hours_incident_is_reportable_at_the_smallest_size(tmp_path: Path, seed: int) -> None:
    """carol's planted 02:00 reads are an incident only against her office hours: at least
    `off_hours_min_events` of her events, off hours at most `off_hours_max_share` of them (counted
    here from the brokers' authorizer lines alone, fewer than the audit reads)."""
    from datetime import datetime

    from spark_compliance.reports import Params

    generator.generate(tmp_path, generator.MIN_LINES, seed)
    times = [datetime.strptime(line[1:20], "%Y-%m-%d %H:%M:%S")
             for log in (tmp_path / "logs").glob("broker-*/kafka-authorizer.log")
             for line in log.read_text().splitlines() if "Principal = User:carol is Allowed" in line]
    off = [t for t in times if not (t.weekday() < 5 and 8 <= t.hour < 18)]
    params = Params()
    assert len(off) == 6 and len(times) >= params.off_hours_min_events
    assert len(off) / len(times) <= params.off_hours_max_share


# Client-chosen strings aimed at every context the page has: element text, single- and double-quoted
# attributes, SVG <title>/<text>, a closing </style> or </title>, and the 28-character cut of chart labels.
HOSTILE = ["</script><script>document.title='pwned'</script>", "\"><img src=x onerror=\"document.title='pwned'\">",
           "'><svg onload=\"document.title='pwned'\">", "</style><img src=x onerror=document.title='pwned'>",
           "</title><img src=x onerror=document.title='pwned'>", "xxxxxxxxxxxxxxxxxxxxxxxxxxx<img src=x onerror=1>",
           "a\x00b\u2028c&amp;"]


def _hostile_page() -> str:
    many = HOSTILE * 2
    return html_report.render(
        summary={"period": {"start": many[0], "end": many[1]}, "generated_at": many[2], "inputs": many,
                 "line_quality": [{"source": h, "kind": h, "lines": 1} for h in HOSTILE],
                 "bad_line_sample": [{"source": h, "reason": h, "raw": h} for h in HOSTILE]},
        findings=[{"rule": h, "severity": "HIGH", "principal": h, "host": h, "resource": h, "count": h,
                   "first_seen": h, "last_seen": h, "evidence": [h, h], "regulations": [h]} for h in HOSTILE],
        charts={"denials": [(h, 1.0) for h in HOSTILE], "top_principals": [(h, 2.0) for h in HOSTILE],
                "access_heat": [(0, 1, 1.0)], "volume": [(h, 3.0) for h in HOSTILE]})


def test_report_forbids_scripts_and_every_fetch_by_content_security_policy() -> None:
    page = _hostile_page()
    head = page[:page.index("<style>")]
    assert ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
            'base-uri \'none\'; form-action \'none\'">') in head


@pytest.mark.browser
def test_hostile_names_stay_text_in_headless_chromium(tmp_path: Path) -> None:
    """Rendered by a real browser: no element or attribute of the names' making exists, nothing ran, and
    every name reads back as the text it was."""
    from html.parser import HTMLParser

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium is not None, "Debian's chromium is required (make test installs it)"

    def dump(text: str) -> str:
        page = tmp_path / "report.html"
        page.write_text(text, encoding="utf-8")
        dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                              "--disable-background-networking", "--disable-component-update", "--disable-sync",
                              "--no-first-run", f"--user-data-dir={tmp_path / 'u'}", "--virtual-time-budget=2000",
                              "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        return dom.stdout

    # Were the escaping ever to slip, the policy still stops the script: an injected one does not run.
    slipped = _hostile_page().replace("<h2>Summary</h2>", "<script>document.title='pwned'</script><h2>Summary</h2>")
    assert "<title>kgov compliance audit report</title>" in dump(slipped)
    assert "<title>pwned</title>" in dump(slipped.replace("Content-Security-Policy", "X-Not-A-Policy"))

    class Collect(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: set[str] = set()
            self.attrs: set[str] = set()
            self.title = ""
            self._in_title = False

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.tags.add(tag)
            self.attrs.update(a for a, _ in attrs)
            self._in_title = tag == "title" and not self.title

        def handle_endtag(self, tag: str) -> None:
            self._in_title = False

        def handle_data(self, data: str) -> None:
            if self._in_title:
                self.title += data

    text = dump(_hostile_page())
    seen = Collect()
    seen.feed(text)
    assert seen.title == "kgov compliance audit report"
    assert "img" not in seen.tags and "script" not in seen.tags
    assert not {a for a in seen.attrs if a.startswith("on")}
    assert "pwned" not in seen.title
    for h in HOSTILE[:5]:
        assert html.escape(h, quote=False) in text  # shown, as text
