"""`report.html`: one self-contained page (inline CSS and SVG, no script, no network) for auditors.

Its Content-Security-Policy forbids scripts and every fetch, so an escaping slip could not run anything.

Pure: takes plain Python data collected by the job and returns the HTML text. Every value from the
logs is escaped (group ids and client ids are chosen by clients and may contain markup).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from spark_compliance.findings import SEVERITY_ORDER

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}
.meta{color:#5b6577;font-size:13px}.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));gap:18px}
.card{border:1px solid #dde2ea;border-radius:6px;padding:12px}.card h3{margin:0 0 8px;font-size:14px}
table{border-collapse:collapse;width:100%;font-size:12px}th,td{border-bottom:1px solid #eef1f5;padding:4px 6px;
text-align:left;vertical-align:top}th{background:#f5f7fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.sev{font-weight:600;padding:1px 6px;border-radius:3px;color:#fff;font-size:11px}
.CRITICAL{background:#8b0000}.HIGH{background:#c0392b}.MEDIUM{background:#d68910}.LOW{background:#5d6d7e}
.tiles{display:flex;flex-wrap:wrap;gap:8px}.tile{border:1px solid #dde2ea;border-radius:6px;padding:8px 12px;min-width:120px}
.tile b{display:block;font-size:20px}code{font-size:11px;word-break:break-all}svg text{font-size:10px;fill:#3b4454}
"""


# A second net under the escaping: the page runs no script and fetches nothing (no image, font, frame or
# form target), whatever a name from the logs might smuggle in; only its own inline <style> applies.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _e(v: object) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def bar_chart(items: Sequence[tuple[str, float]], *, width: int = 440, label: str = "",
              fmt: Any = None) -> str:
    """Horizontal bars, largest first."""
    if not items:
        return "<p class='meta'>no data</p>"
    fmt = fmt or (lambda x: f"{x:,.0f}")
    row, left = 18, 190
    top = max(v for _, v in items) or 1
    h = row * len(items) + 4
    parts = [f"<svg role='img' aria-label='{_e(label)}' width='{width}' height='{h}' viewBox='0 0 {width} {h}'>"]
    for i, (name, v) in enumerate(items):
        y = i * row + 2
        w = max(1.0, (width - left - 70) * v / top)
        short = name if len(name) <= 30 else name[:28] + "…"
        parts.append(f"<text x='{left - 4}' y='{y + 12}' text-anchor='end'><title>{_e(name)}</title>{_e(short)}</text>"
                     f"<rect x='{left}' y='{y + 2}' width='{w:.1f}' height='{row - 5}' fill='#3d6fb6'/>"
                     f"<text x='{left + w + 4:.1f}' y='{y + 12}'>{_e(fmt(v))}</text>")
    parts.append("</svg>")
    return "".join(parts)


def time_chart(points: Sequence[tuple[str, float]], *, width: int = 440, height: int = 160, label: str = "") -> str:
    """Columns over time (one per hour), with the first and last label."""
    if not points:
        return "<p class='meta'>no data</p>"
    top = max(v for _, v in points) or 1
    pad_l, pad_b = 34, 18
    cw = (width - pad_l - 4) / len(points)
    parts = [f"<svg role='img' aria-label='{_e(label)}' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}'>",
             f"<line x1='{pad_l}' y1='{height - pad_b}' x2='{width}' y2='{height - pad_b}' stroke='#99a'/>",
             f"<text x='{pad_l - 4}' y='10' text-anchor='end'>{top:,.0f}</text>",
             f"<text x='{pad_l - 4}' y='{height - pad_b}' text-anchor='end'>0</text>"]
    for i, (t, v) in enumerate(points):
        bh = (height - pad_b - 12) * v / top
        x = pad_l + i * cw
        parts.append(f"<rect x='{x:.2f}' y='{height - pad_b - bh:.2f}' width='{max(cw - 0.3, 0.6):.2f}' "
                     f"height='{bh:.2f}' fill='#c0392b'><title>{_e(t)}: {v:,.0f}</title></rect>")
    parts.append(f"<text x='{pad_l}' y='{height - 4}'>{_e(points[0][0])}</text>")
    parts.append(f"<text x='{width - 2}' y='{height - 4}' text-anchor='end'>{_e(points[-1][0])}</text></svg>")
    return "".join(parts)


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def heat_map(cells: Mapping[tuple[int, int], float], *, label: str = "") -> str:
    """Weekday (0 = Monday) x hour of day, darker = more accesses."""
    top = max(cells.values(), default=0) or 1
    cw, ch, left, topm = 17, 16, 34, 14
    w, h = left + 24 * cw + 4, topm + 7 * ch + 4
    parts = [f"<svg role='img' aria-label='{_e(label)}' width='{w}' height='{h}' viewBox='0 0 {w} {h}'>"]
    for hour in range(0, 24, 3):
        parts.append(f"<text x='{left + hour * cw + 2}' y='10'>{hour:02d}</text>")
    for d in range(7):
        parts.append(f"<text x='{left - 4}' y='{topm + d * ch + 12}' text-anchor='end'>{_DAYS[d]}</text>")
        for hour in range(24):
            v = cells.get((d, hour), 0)
            alpha = 0.06 + 0.94 * (v / top) if v else 0.03
            parts.append(f"<rect x='{left + hour * cw}' y='{topm + d * ch}' width='{cw - 1}' height='{ch - 1}' "
                         f"fill='#1f4e96' fill-opacity='{alpha:.3f}'><title>{_DAYS[d]} {hour:02d}:00 UTC: "
                         f"{v:,.0f}</title></rect>")
    parts.append("</svg>")
    return "".join(parts)


def render(*, summary: Mapping[str, Any], findings: Sequence[Mapping[str, Any]],
           charts: Mapping[str, Any]) -> str:
    by_sev = {s: 0 for s in SEVERITY_ORDER}
    for f in findings:
        by_sev[str(f["severity"])] = by_sev.get(str(f["severity"]), 0) + 1
    rules: dict[str, int] = {}
    for f in findings:
        rules[str(f["rule"])] = rules.get(str(f["rule"]), 0) + 1
    period = summary.get("period") or {}
    tiles = "".join(f"<div class='tile'><span class='sev {s}'>{s}</span><b>{n}</b></div>" for s, n in by_sev.items())
    tiles += "".join(f"<div class='tile'>{_e(k)}<b>{v:,}</b></div>" for k, v in (
        ("events", summary.get("events", 0)), ("lines read", summary.get("lines", 0)),
        ("bad lines", summary.get("bad_lines", 0))))
    rows = []
    for f in findings:
        ev = "<br>".join(_e(x) for x in (f.get("evidence") or []))
        rows.append(
            f"<tr><td><span class='sev {_e(f['severity'])}'>{_e(f['severity'])}</span></td><td>{_e(f['rule'])}</td>"
            f"<td><code>{_e(f.get('principal'))}</code></td><td>{_e(f.get('host'))}</td>"
            f"<td><code>{_e(f.get('resource'))}</code></td><td class='num'>{_e(f.get('count'))}</td>"
            f"<td>{_e(f.get('first_seen'))}</td><td>{_e(f.get('last_seen'))}</td><td>{ev}</td>"
            f"<td>{_e(', '.join(f.get('regulations') or []))}</td></tr>")
    quality_rows = "".join(
        f"<tr><td>{_e(q['source'])}</td><td>{_e(q['kind'])}</td><td class='num'>{q['lines']:,}</td></tr>"
        for q in summary.get("line_quality", []))
    bad_rows = "".join(
        f"<tr><td>{_e(b['source'])}</td><td>{_e(b['reason'])}</td><td><code>{_e(b['raw'])}</code></td></tr>"
        for b in summary.get("bad_line_sample", []))
    rule_rows = "".join(f"<tr><td>{_e(r)}</td><td class='num'>{n}</td></tr>" for r, n in sorted(rules.items()))
    heat = {(int(d), int(h)): float(v) for d, h, v in charts.get("access_heat", [])}
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>kgov compliance audit report</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>
<body>
<h1>Kafka compliance audit</h1>
<div class="meta">Period {_e(period.get('start'))} to {_e(period.get('end'))} (UTC) &middot; generated
{_e(summary.get('generated_at'))} &middot; inputs: {_e(', '.join(summary.get('inputs', [])))}</div>
<h2>Summary</h2><div class="tiles">{tiles}</div>
<h2>Charts</h2>
<div class="grid">
<div class="card"><h3>Denied accesses per hour</h3>{time_chart(charts.get('denials', []), label='denials per hour')}</div>
<div class="card"><h3>Top principals (authorization decisions)</h3>
{bar_chart(charts.get('top_principals', []), label='top principals')}</div>
<div class="card"><h3>Access hours (allowed decisions, UTC)</h3>{heat_map(heat, label='access heat map')}</div>
<div class="card"><h3>Bytes fetched by principal</h3>
{bar_chart(charts.get('volume', []), label='volume by principal', fmt=_fmt_bytes)}</div>
</div>
<h2>Findings ({len(findings)})</h2>
<table><thead><tr><th>Severity</th><th>Rule</th><th>Principal</th><th>Host</th><th>Resource</th><th>Count</th>
<th>First seen</th><th>Last seen</th><th>Evidence</th><th>Regulations</th></tr></thead><tbody>{''.join(rows)}</tbody></table>
<h2>Findings by rule</h2><table><thead><tr><th>Rule</th><th>Findings</th></tr></thead><tbody>{rule_rows}</tbody></table>
<h2>Input quality</h2>
<table><thead><tr><th>Source</th><th>Kind</th><th>Lines</th></tr></thead><tbody>{quality_rows}</tbody></table>
<h2>Sample of unparseable lines</h2>
<table><thead><tr><th>Source</th><th>Reason</th><th>Line (first 500 characters)</th></tr></thead>
<tbody>{bad_rows or "<tr><td colspan='3'>none</td></tr>"}</tbody></table>
<p class="meta">Report tables (Parquet) are in <code>reports/</code>; the normalised events in <code>events/</code>.</p>
</body></html>
"""
