"""The trend page of a nightly results directory: one self-contained HTML file, no server.

``write_page`` draws, for every performance variable of every case, its value over the nights
with the history band that judged each night (inline SVG: the page opens from a file share),
failed nights as red crosses, invalid ones as hollow grey circles, regressions as red dots and
improvements as green ones; each point's tooltip names the night, the hvdcore version and
commit. Above the plots: tonight's table with the change against history and the rule that
judged each value, and every night with its version, commit, result counts and links to its
summary and stage directory. When tonight ran the data-plane check, its per-size table and
busbw plot follow tonight's table (``planes_page.py``).
"""

from __future__ import annotations

import datetime as dt
import html
import math
import os
from collections.abc import Sequence
from pathlib import Path

from history import Night, Verdict
from planes_page import planes_html

__all__ = ["fmt", "render_page", "write_page"]

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 720, 230, 64, 16, 14, 46
COLOURS = {"regression": "#c62828", "improvement": "#2e7d32", "pass": "#1f4e9a",
           "failed": "#c62828", "information": "#6d4c99", "no history": "#1f4e9a",
           "unconfirmed": "#e69500"}
CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.regression,.failed{background:#fde0e0;font-weight:bold}.improvement{background:#e2f4e2}
.invalid{background:#eee;color:#666}
figure{margin:0 0 1.2em}figcaption{font-size:13px;font-weight:600}
svg text{font-size:11px;fill:#333}
.legend span{margin-right:1.2em;font-size:13px}
.planes-row{display:flex;flex-wrap:wrap;gap:1.5em}.planes caption{text-align:left;font-size:13px}
"""


def fmt(value: float | None) -> str:
    """A value with 4 significant digits ('-' for none)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4g}"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _night_time(night: Night) -> str:
    return dt.datetime.fromtimestamp(night.start, dt.timezone.utc).strftime("%m-%d %H:%M")


def _night_row(night: Night, verdicts: Sequence[Verdict], results: Path) -> str:
    base = f"nights/{night.label}"
    cases = night.cases
    n_fail = sum(c.failed and not c.invalid for c in cases)
    n_inv = sum(c.invalid for c in cases)
    n_reg = sum(v.regression for v in verdicts)
    cls = "failed" if n_fail or n_reg else ""
    when = dt.datetime.fromtimestamp(night.start, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    links = [f'<a href="{_e(base)}/summary.md">summary</a>']
    if (results / base / "stage").exists():
        links.append(f'<a href="{_e(base)}/stage/">stage</a>')
    if (results / base / "junit.xml").exists():
        links.append(f'<a href="{_e(base)}/junit.xml">junit</a>')
    info = night.info
    return (f'<tr class="{cls}"><td>{_e(night.label)}</td><td>{when} UTC</td>'
            f'<td>{_e(info.get("hvdcore_version", "?"))}</td>'
            f'<td>{_e(info.get("hvdcore_commit", "?"))}</td>'
            f'<td>{_e(info.get("hvdcore_module", "?"))}</td>'
            f'<td class="n">{sum(c.result == "pass" for c in cases)}</td>'
            f'<td class="n">{n_fail}</td><td class="n">{n_inv}</td><td class="n">{n_reg}</td>'
            f'<td>{" ".join(links)}</td></tr>')


def _tonight_table(verdicts: Sequence[Verdict]) -> str:
    rows = []
    for v in sorted(verdicts, key=lambda v: (v.case, v.sysenv, v.var)):
        b = v.band
        change = f"{v.change:+.1%}" if v.change is not None else "-"
        band = f"[{fmt(b.low)}, {fmt(b.high)}]" if b else "-"
        rows.append(f'<tr class="{_e(v.verdict)}"><td>{_e(v.case)}</td><td>{_e(v.sysenv)}</td>'
                    f'<td>{_e(v.var)}</td><td class="n">{fmt(v.value)} {_e(v.unit)}</td>'
                    f'<td class="n">{fmt(b.centre) if b else "-"}</td><td>{band}</td>'
                    f'<td class="n">{change}</td><td>{_e(v.verdict)}</td>'
                    f'<td>{_e(v.rule)}</td></tr>')
    return ("<table><tr><th>Case</th><th>Partition+environment</th><th>Variable</th>"
            "<th>Value</th><th>History centre</th><th>Band</th><th>Change</th><th>Verdict</th>"
            "<th>Judged by</th></tr>" + "".join(rows) + "</table>")


def _plot(series: str, nights: Sequence[Night], points: list[Verdict | None]) -> str:
    """One variable over the nights: band, points, axes (inline SVG)."""
    ys = [p.value for p in points if p and p.value is not None]
    ys += [y for p in points if p and p.band for y in (p.band.low, p.band.high)]
    if not ys:
        return ""
    lo, hi = min(ys), max(ys)
    if hi == lo:
        lo, hi = lo - abs(lo) * 0.1 - 1e-9, hi + abs(hi) * 0.1 + 1e-9
    span = hi - lo
    lo, hi = lo - 0.08 * span, hi + 0.08 * span
    n = len(nights)
    # each night's band is a bar centred on its night; the first and last stay inside the frame
    half = min(24.0, 0.35 * (W - PAD_L - PAD_R) / max(1, n - 1))
    inner = W - PAD_L - PAD_R - 2 * (half + 4)

    def x(i: int) -> float:
        return PAD_L + half + 4 + inner * (0.5 if n == 1 else i / (n - 1))

    def y(v: float) -> float:
        return PAD_T + (H - PAD_T - PAD_B) * (1 - (v - lo) / (hi - lo))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'role="img" aria-label="{_e(series)}">',
             f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
             f'height="{H - PAD_T - PAD_B}" fill="#fafafa" stroke="#bbb"/>']
    for k in range(5):  # y grid and labels
        v = lo + (hi - lo) * k / 4
        parts.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="#e4e4e4"/><text x="{PAD_L - 6}" y="{y(v) + 4:.1f}" '
                     f'text-anchor="end">{fmt(v)}</text>')
    banded = [(i, p.band) for i, p in enumerate(points) if p and p.band]
    for i, b in banded:  # the band that judged each night, as a bar
        parts.append(f'<rect class="band" x="{x(i) - half:.1f}" y="{y(b.high):.1f}" '
                     f'width="{2 * half:.1f}" height="{max(1.0, y(b.low) - y(b.high)):.1f}" '
                     f'fill="#9ec5ee" fill-opacity="0.45"><title>band [{fmt(b.low)}, '
                     f'{fmt(b.high)}], centre {fmt(b.centre)}, {b.nights} nights</title></rect>'
                     f'<line x1="{x(i) - half:.1f}" x2="{x(i) + half:.1f}" '
                     f'y1="{y(b.centre):.1f}" y2="{y(b.centre):.1f}" stroke="#5a8fc8"/>')
    line = [(x(i), y(p.value)) for i, p in enumerate(points)
            if p and p.value is not None and p.verdict not in ("invalid", "no value")]
    if len(line) > 1:
        parts.append('<polyline fill="none" stroke="#8aa" stroke-width="1" points="'
                     + " ".join(f"{a:.1f},{b:.1f}" for a, b in line) + '"/>')
    step = max(1, math.ceil(n / 12))
    for i, night in enumerate(nights):
        if i % step == 0 or i == n - 1:
            parts.append(f'<text x="{x(i):.1f}" y="{H - PAD_B + 14}" text-anchor="middle">'
                         f'{_night_time(night)}</text>')
        p = points[i]
        if p is None:
            continue
        tip = (f"{night.label}: {p.var}={fmt(p.value)} {p.unit}, {p.verdict} ({p.rule}); "
               f"hvdcore {night.info.get('hvdcore_version', '?')} commit "
               f"{night.info.get('hvdcore_commit', '?')}")
        if p.value is None:
            parts.append(f'<text class="pt-novalue" x="{x(i):.1f}" y="{PAD_T + 12}" '
                         f'text-anchor="middle" fill="#c62828">✕<title>{_e(tip)}</title>'
                         '</text>')
        elif p.verdict == "invalid":
            parts.append(f'<circle class="pt-invalid" cx="{x(i):.1f}" cy="{y(p.value):.1f}" '
                         f'r="5" fill="none" stroke="#888" stroke-width="1.5">'
                         f'<title>{_e(tip)}</title></circle>')
        elif p.verdict != "regression" and (p.verdict == "failed" or p.case_result != "pass"):
            cx, cy = x(i), y(p.value)
            parts.append(f'<path class="pt-failed" d="M{cx - 5:.1f},{cy - 5:.1f}l10,10'
                         f'm0,-10l-10,10" stroke="#c62828" stroke-width="2.5">'
                         f'<title>{_e(tip)}</title></path>')
        else:
            colour = COLOURS.get(p.verdict, "#1f4e9a")
            r = 5.5 if p.verdict in ("regression", "improvement", "unconfirmed") else 3.5
            parts.append(f'<circle class="pt-{_e(p.verdict.replace(" ", "-"))}" '
                         f'cx="{x(i):.1f}" cy="{y(p.value):.1f}" r="{r}" fill="{colour}">'
                         f'<title>{_e(tip)}</title></circle>')
    unit = next((p.unit for p in points if p and p.unit), "")
    parts.append(f'<text x="14" y="{(H - PAD_B) / 2:.0f}" transform="rotate(-90 14 '
                 f'{(H - PAD_B) / 2:.0f})" text-anchor="middle">{_e(unit)}</text>')
    parts.append(f'<text x="{(W + PAD_L) / 2:.0f}" y="{H - 8}" text-anchor="middle">'
                 'night (UTC date, time)</text></svg>')
    return "".join(parts)


def render_page(nights: Sequence[Night], verdicts: Sequence[Sequence[Verdict]],
                results: Path, params: str = "",
                planes: dict[str, list[dict]] | None = None) -> str:
    """The whole page as a string (``planes``: tonight's data-plane rows, per case)."""
    order: list[str] = []
    by_series: dict[str, list[Verdict | None]] = {}
    for i, night_verdicts in enumerate(verdicts):
        for v in night_verdicts:
            if v.series not in by_series:
                order.append(v.series)
                by_series[v.series] = [None] * len(nights)
            by_series[v.series][i] = v
    tonight = nights[-1] if nights else None
    title = f"hvdcore nightly trend: {results.name}"
    body = [f"<h1>{_e(title)}</h1>",
            f"<p>{len(nights)} nights in <code>{_e(results)}</code>; page written "
            f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC. {_e(params)}</p>"]
    if tonight is not None:
        body += [f"<h2>Tonight: {_e(tonight.label)}</h2>", _tonight_table(verdicts[-1])]
        if planes and any(planes.values()):
            body += ['<h2 id="planes">Data planes tonight: busbw per size</h2>',
                     planes_html(planes)]
    body += ["<h2>Nights</h2><table><tr><th>Night</th><th>Started</th><th>hvdcore</th>"
             "<th>Commit</th><th>Module</th><th>Passed</th><th>Failed</th><th>Invalid</th>"
             "<th>Regressions</th><th>Links</th></tr>"]
    body += [_night_row(n, v, results) for n, v in reversed(list(zip(nights, verdicts,
                                                                     strict=True)))]
    body += ["</table>", "<h2>Performance over the nights</h2>",
             '<p class="legend"><span style="color:#1f4e9a">● judged, within band</span>'
             '<span style="color:#c62828">● regression</span>'
             '<span style="color:#2e7d32">● improvement</span>'
             '<span style="color:#e69500">● outside the band, not confirmed by a second run'
             '</span>'
             '<span style="color:#c62828">✕ case failed</span>'
             '<span style="color:#888">○ invalid measurement</span>'
             '<span style="color:#5a8fc8">▮ history band that judged the night</span></p>']
    for series in order:
        svg = _plot(series, nights, by_series[series])
        if svg:
            body.append(f'<figure class="plot"><figcaption>{_e(series)}</figcaption>{svg}'
                        "</figure>")
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def write_page(path: str | os.PathLike[str], nights: Sequence[Night],
               verdicts: Sequence[Sequence[Verdict]], results: Path, params: str = "",
               planes: dict[str, list[dict]] | None = None) -> None:
    """Write the trend page atomically (a reader of the share never sees half a page)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_page(nights, verdicts, results, params, planes))
    os.replace(tmp, path)
