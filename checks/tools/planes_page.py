"""The data-plane check's per-size table and plot as HTML, for the nightly trend page.

The same figures as ``planes_report.py`` writes into ``summary.md`` and ``planes.png`` (rows
from :func:`planes_report.load_rows`), drawn here as an HTML table and an inline SVG (busbw
against message size, log-log, one panel per plane; hvdcore solid with dots, raw dashed), so
that the page stays one self-contained file.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from planes_report import OPS, size_label

__all__ = ["planes_html"]

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 640, 300, 60, 120, 24, 44
#: One colour per collective (matplotlib's first five, as ``planes.png`` has).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(plane: str, rows: Sequence[dict[str, Any]]) -> str:
    ops = [op for op in OPS if any(r["op"] == op for r in rows)]
    head = "".join(f"<th>{op}</th>" for op in ops)
    body = []
    for size in sorted({r["bytes"] for r in rows}):
        cells = []
        for op in ops:
            r = next((x for x in rows if x["op"] == op and x["bytes"] == size), None)
            if r is None:
                cells.append('<td class="n">–</td>')
                continue
            bad = ' class="n failed" title="wrong results at this size"' if r["wrong"] else \
                ' class="n"'
            cells.append(f"<td{bad}>{r['busbw']:.4g} / {r['raw_busbw']:.4g}</td>")
        body.append(f"<tr><td>{size_label(size)}</td>{''.join(cells)}</tr>")
    top = max(r["bytes"] for r in rows)
    at_top = {r["op"]: r["ratio"] for r in rows if r["bytes"] == top}
    ratios = "".join(f'<td class="n">{at_top[op]:.3f}</td>' if op in at_top else
                     '<td class="n">–</td>' for op in ops)
    raws = ", ".join(sorted({f"{r['op']}: {r['raw']}" for r in rows}))
    return (f'<table class="planes"><caption>{_e(plane)} plane, {rows[0]["ranks"]} ranks: '
            f"busbw GB/s, hvdcore / raw (raw peer: {_e(raws)})</caption>"
            f"<tr><th>bytes</th>{head}</tr>{''.join(body)}"
            f"<tr><th>ratio at {size_label(top)}</th>{ratios}</tr></table>")


def _svg(plane: str, rows: Sequence[dict[str, Any]]) -> str:
    pts = [r for r in rows if r["busbw"] > 0 and r["raw_busbw"] > 0]
    if not pts:
        return ""
    xs = [math.log2(r["bytes"]) for r in pts]
    ys = [math.log10(v) for r in pts for v in (r["busbw"], r["raw_busbw"])]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    if y1 == y0:
        y1 += 1

    def x(b: int) -> float:
        return PAD_L + (W - PAD_L - PAD_R) * (math.log2(b) - x0) / (x1 - x0)

    def y(v: float) -> float:
        return PAD_T + (H - PAD_T - PAD_B) * (1 - (math.log10(v) - y0) / (y1 - y0))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img" '
           f'aria-label="busbw per size, {_e(plane)} plane">',
           f'<text x="{PAD_L}" y="15">{_e(plane)} plane, {rows[0]["ranks"]} ranks</text>',
           f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
           f'height="{H - PAD_T - PAD_B}" fill="#fafafa" stroke="#bbb"/>']
    for k in range(y0, y1 + 1):  # a grid line per decade
        out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(10.0 ** k):.1f}" '
                   f'y2="{y(10.0 ** k):.1f}" stroke="#e4e4e4"/><text x="{PAD_L - 6}" '
                   f'y="{y(10.0 ** k) + 4:.1f}" text-anchor="end">{10.0 ** k:g}</text>')
    sizes = sorted({r["bytes"] for r in pts})
    step = math.ceil(len(sizes) / 6)
    # every step-th size from the largest down (the largest always labelled)
    for b in sizes[::-1][::step]:
        out.append(f'<text x="{x(b):.1f}" y="{H - PAD_B + 14}" text-anchor="middle">'
                   f"{size_label(b)}</text>")
    out.append(f'<text x="{(W - PAD_R + PAD_L) / 2:.0f}" y="{H - 8}" text-anchor="middle">'
               'message size (bytes)</text><text x="14" y="{0:.0f}" transform="rotate(-90 14 '
               '{0:.0f})" text-anchor="middle">busbw (GB/s)</text>'.format((H - PAD_B) / 2))
    for i, op in enumerate(o for o in OPS if any(r["op"] == o for r in pts)):
        mine = sorted((r for r in pts if r["op"] == op), key=lambda r: r["bytes"])
        colour = COLOURS[OPS.index(op) % len(COLOURS)]
        for key, dash in (("busbw", ""), ("raw_busbw", ' stroke-dasharray="5,3"')):
            line = " ".join(f"{x(r['bytes']):.1f},{y(r[key]):.1f}" for r in mine)
            side = "hvdcore" if key == "busbw" else "raw"
            out.append(f'<polyline class="series" fill="none" stroke="{colour}" '
                       f'stroke-width="1.5"{dash} points="{line}"><title>{op} {side}</title>'
                       "</polyline>")
        for r in mine:
            out.append(f'<circle class="pt" cx="{x(r["bytes"]):.1f}" cy="{y(r["busbw"]):.1f}" '
                       f'r="2.5" fill="{colour}"><title>{op} {size_label(r["bytes"])}: hvdcore '
                       f'{r["busbw"]:.4g} GB/s, raw {r["raw_busbw"]:.4g} GB/s</title></circle>')
        ly = PAD_T + 10 + 18 * i
        out.append(f'<line x1="{W - PAD_R + 10}" x2="{W - PAD_R + 30}" y1="{ly}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="2"/><text x="{W - PAD_R + 34}" '
                   f'y="{ly + 4}">{op}</text>')
    ly = PAD_T + 10 + 18 * 6
    lx = W - PAD_R + 10
    out.append(f'<line x1="{lx}" x2="{lx + 20}" y1="{ly}" y2="{ly}" stroke="#555" '
               f'stroke-width="1.5"/><text x="{lx + 24}" y="{ly + 4}">hvdcore</text>'
               f'<line x1="{lx}" x2="{lx + 20}" y1="{ly + 18}" y2="{ly + 18}" stroke="#555" '
               f'stroke-dasharray="5,3"/><text x="{lx + 24}" y="{ly + 22}">raw</text></svg>')
    return "".join(out)


def planes_html(cases: dict[str, list[dict[str, Any]]]) -> str:
    """Per case and plane: the per-size table and the busbw plot ('' when no case ran)."""
    parts = []
    for name, rows in cases.items():
        if not rows:
            continue
        parts.append(f'<h3 class="planes-case">{_e(name)}</h3><div class="planes-row">')
        for plane in sorted({r["plane"] for r in rows}):
            mine = [r for r in rows if r["plane"] == plane]
            parts.append(f'<div class="planes-plane">{_table(plane, mine)}'
                         f'<figure class="planes-plot">{_svg(plane, mine)}</figure></div>')
        parts.append("</div>")
    return "".join(parts)
