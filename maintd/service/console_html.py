"""HTML building blocks of the web console: the page frame, tables, links and inline SVG charts.

Everything shown passes through :func:`text` (``html.escape`` with quotes), and every value placed in a URL
through :func:`link` (``urllib.parse.urlencode``): a table name, property or error holding markup or script is
shown as text. Pages need no JavaScript and load nothing from elsewhere (no external stylesheet, font or
script), so the console works behind a port-forward with no internet access; the Content-Security-Policy the
server sends forbids scripts altogether.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from maintd.units import fmt_bytes

_STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#1d232a;background:#f6f7f9;font-size:14px}
header{background:#1d3557;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:baseline}
header a{color:#fff;text-decoration:none}header strong{font-size:1.1em}
main{padding:1em 1.2em}h1{font-size:1.3em;margin:.2em 0 .6em}h2{font-size:1.1em;margin:1.2em 0 .4em}
table{border-collapse:collapse;background:#fff;margin-bottom:.8em}
th,td{border:1px solid #d7dbe0;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#eef1f4;white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b00020;font-weight:600}.ok{color:#1b7f3b}.off{color:#777}.warn{color:#a65e00}
.tiles{display:flex;gap:.8em;flex-wrap:wrap;margin-bottom:1em}
.tile{background:#fff;border:1px solid #d7dbe0;padding:.5em .9em;min-width:8em}
.tile b{display:block;font-size:1.4em}form{margin:.5em 0 1em}code,pre{font-size:12px}
pre{background:#fff;border:1px solid #d7dbe0;padding:.5em;overflow:auto;max-height:30em}
nav.pages a,nav.pages span{margin-right:.8em}svg{background:#fff;border:1px solid #d7dbe0}
"""


def text(value: object) -> str:
    """``value`` as HTML text: every ``<``, ``>``, ``&`` and quote escaped; None as an empty string."""
    return "" if value is None else html.escape(str(value), quote=True)


def link(path: str, label: object, **params: object) -> str:
    """An ``<a>`` to ``path`` with ``params`` as its query (None values left out)."""
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    href = f"{path}?{query}" if query else path
    return f'<a href="{text(href)}">{text(label)}</a>'


def page(title: str, body: str, *, refreshed: datetime | None = None) -> bytes:
    """A whole HTML document: the header's navigation, ``title`` and ``body`` (already HTML)."""
    when = "" if refreshed is None else f"<span>read {text(stamp(refreshed))}</span>"
    doc = (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1"><link rel=icon href="data:,">'
        f"<title>{text(title)} · maintd</title><style>{_STYLE}</style></head><body>"
        '<header><strong><a href="/">maintd</a></strong><a href="/">fleet</a><a href="/daemon">daemon</a>'
        f'<a href="/metrics">metrics</a>{when}</header><main><h1>{text(title)}</h1>{body}</main></body></html>'
    )
    return doc.encode()


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, empty: str = "none") -> str:
    """An HTML table; ``headers`` are text (escaped), ``rows`` cells are HTML (escape them with :func:`text`)."""
    head = "".join(f"<th>{h if h.startswith('<') else text(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class=off>{text(empty)}</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(cell: str) -> str:
    if cell.startswith("\x00n"):  # a number: right-aligned
        return f"<td class=n>{cell[2:]}</td>"
    return f"<td>{cell}</td>"


def num(value: float | int | None, *, unit: str = "") -> str:
    """A right-aligned number cell (see :func:`table`); None as an empty cell."""
    if value is None:
        return "\x00n"
    shown = f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
    return "\x00n" + text(shown + unit)


def size(value: int | None) -> str:
    """A right-aligned byte-count cell."""
    return "\x00n" if value is None else "\x00n" + text(fmt_bytes(value))


def pairs(items: Mapping[str, object]) -> str:
    """A two-column table of keys and values (both escaped)."""
    return table(["key", "value"], ([f"<code>{text(k)}</code>", text(v)] for k, v in items.items()))


def stamp(moment: datetime | None) -> str:
    """A UTC time to the second, or ``never``."""
    return "never" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def age(seconds: float | None) -> str:
    """A duration as ``3 d 4 h``, ``12 min``, ``40 s``; empty for None."""
    if seconds is None:
        return ""
    s = max(0.0, seconds)
    for unit, length, smaller, small_length in (("d", 86400, "h", 3600), ("h", 3600, "min", 60)):
        if s >= length:
            rest = int((s % length) // small_length)
            return f"{int(s // length)} {unit}" + (f" {rest} {smaller}" if rest else "")
    return f"{int(s // 60)} min" if s >= 60 else f"{s:.0f} s" if s >= 1 else f"{s:.2f} s"


@dataclass(frozen=True, slots=True)
class Point:
    """One point of a chart: when, how much, and its colour class (``ok``, ``bad``, ``off``)."""

    at: datetime
    value: float
    state: str = "ok"
    label: str = ""


_COLOURS = {"ok": "#1b7f3b", "bad": "#b00020", "off": "#888", "warn": "#a65e00"}


def chart(title: str, points: Sequence[Point], *, unit: str = "", width: int = 720, height: int = 180) -> str:
    """An inline SVG scatter-and-line chart of ``points`` over time (no script); a note when there are none."""
    if not points:
        return f"<p class=off>{text(title)}: nothing recorded yet.</p>"
    left, right, top, bottom = 60, 10, 22, 26
    times = [p.at.timestamp() for p in points]
    t0, t1 = min(times), max(times)
    top_value = max(p.value for p in points) or 1.0
    span = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return left + (t - t0) / span * (width - left - right) if t1 > t0 else (left + width - right) / 2

    def y(v: float) -> float:
        return top + (1 - v / top_value) * (height - top - bottom)

    ordered = sorted(zip(times, points, strict=True), key=lambda tp: tp[0])
    line = " ".join(f"{x(t):.1f},{y(p.value):.1f}" for t, p in ordered)
    dots = "".join(
        f'<circle cx="{x(t):.1f}" cy="{y(p.value):.1f}" r="3.5" fill="{_COLOURS.get(p.state, "#333")}">'
        f"<title>{text(stamp(p.at))}: {text(_short(p.value))}{text(unit)} {text(p.label)}</title></circle>"
        for t, p in ordered
    )
    axis = (f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>'
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>'
            f'<text x="{left - 4}" y="{top + 4}" text-anchor="end" font-size="11">{text(_short(top_value))}{text(unit)}'
            f'</text><text x="{left - 4}" y="{height - bottom}" text-anchor="end" font-size="11">0</text>'
            f'<text x="{left}" y="{height - 8}" font-size="11">{text(_when(t0, points[0].at))}</text>'
            f'<text x="{width - right}" y="{height - 8}" text-anchor="end" font-size="11">'
            f"{text(_when(t1, points[0].at))}</text>")
    return (f'<figure><svg role="img" aria-label="{text(title)}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
            f'<text x="{left}" y="15" font-size="12" font-weight="600">{text(title)}</text>{axis}'
            f'<polyline points="{line}" fill="none" stroke="#8aa1c1" stroke-width="1.2"/>{dots}</svg></figure>')


def _when(timestamp: float, like: datetime) -> str:
    return stamp(datetime.fromtimestamp(timestamp, like.tzinfo))


def _short(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.2f}"


__all__ = ["Point", "age", "chart", "link", "num", "page", "pairs", "size", "stamp", "table", "text"]
