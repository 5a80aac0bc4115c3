"""Plots of a simulation: files per level and read and write amplification over time, per policy.

Two formats, chosen by the file name: ``.png`` (matplotlib, the optional ``plot`` extra) and ``.html``, a
self-contained page of inline SVG written here (no script, no stylesheet or font fetched from anywhere), so it
can be mailed, attached to a ticket or opened on an air-gapped machine.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from maintd.errors import InvalidInputError
from maintd.simulate.engine import LEVELS
from maintd.simulate.report import PolicyPrediction, SimulationReport

FORMATS = {".png": "png", ".html": "html", ".htm": "html"}
PLOT_EXTRA = "pip install 'maintd[plot]'"
LEVEL_COLOURS = {"L0": "#d62728", "L1": "#ff7f0e", "L2": "#2ca02c", "base": "#1f77b4"}
POLICY_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
DASHES = ("", "6 3", "2 3", "8 3 2 3")
MPL_DASHES = ("-", "--", ":", "-.")


def plot_format(path: str | Path) -> str:
    """``png`` or ``html`` from the file name; anything else is a clear error."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InvalidInputError(f"--plot {path}: unknown plot format {suffix or '(no extension)'!r}; "
                                "name the file .png (matplotlib) or .html (a self-contained page)")
    return FORMATS[suffix]


def require_matplotlib() -> None:
    """Raise a clear error naming the extra when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InvalidInputError(f"--plot FILE.png needs matplotlib, which maintd installs with its 'plot' extra: "
                                f"{PLOT_EXTRA}; or write FILE.html, which needs nothing") from None


def write_plot(report: SimulationReport, path: str | Path) -> None:
    """Draw ``report`` into ``path`` (``.png`` or ``.html``)."""
    fmt = plot_format(path)
    if fmt == "png":
        require_matplotlib()
        _png(report, Path(path))
    else:
        Path(path).write_text(html_page(report), encoding="utf-8")


@dataclass(frozen=True)
class _Series:
    label: str
    colour: str
    dash: str
    points: tuple[tuple[float, float], ...]


def _panels(report: SimulationReport) -> list[tuple[str, str, list[_Series]]]:
    """(title, y label, series) of the panels, shared by both formats: files per level for each policy, then
    read and write amplification of every policy."""
    panels = []
    ra, wa = [], []
    for i, p in enumerate(report.policies):
        colour = POLICY_COLOURS[i % len(POLICY_COLOURS)]
        files = [_Series(lvl, LEVEL_COLOURS[lvl], "", tuple((s.hours, float(s.files[lvl])) for s in p.series))
                 for lvl in LEVELS]
        panels.append((f"Files per level: {p.name} (hourly means)", "files", files))
        ra.append(_Series(p.name, colour, DASHES[i % len(DASHES)],
                          tuple((s.hours, s.read_amplification) for s in p.series)))
        wa.append(_Series(p.name, colour, DASHES[i % len(DASHES)], tuple(
            (s.hours, s.write_amplification) for s in p.series if s.write_amplification is not None)))
    return [*panels, ("Read amplification (files a read merges per bucket, hourly means)", "files per bucket", ra),
            ("Write amplification (bytes maintenance wrote per byte written, cumulative)", "ratio", wa)]


def _png(report: SimulationReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(report)
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.0 * len(panels)), sharex=True, squeeze=False)
    axes = axes[:, 0]
    for ax, (title, ylabel, series) in zip(axes, panels, strict=True):
        for s in series:
            if s.points:
                xs, ys = zip(*s.points, strict=True)
                style = MPL_DASHES[DASHES.index(s.dash)] if s.dash in DASHES else "-"
                ax.plot(xs, ys, color=s.colour, linestyle=style, label=s.label, linewidth=1.4)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    axes[-1].set_xlabel("hours from the start of the simulation")
    fig.suptitle(f"maintd simulate {report.table_uri}: {report.days} day(s) from {report.start:%Y-%m-%d %H:%M} UTC",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- HTML (inline SVG) ---------------------------------------------------------------------------------------------

def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering ``[lo, hi]`` (steps of 1, 2 or 5 times a power of ten)."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    return [round(start + i * step, 10) for i in range(math.ceil((hi - start) / step) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.2f}".rstrip("0").rstrip(".")


def svg_chart(title: str, ylabel: str, series: Sequence[_Series], *, width: int = 900, height: int = 300) -> str:
    """One line chart as an inline ``<svg>``: axes, ticks, a legend, and a tooltip per line."""
    left, right, top, bottom = 60, 170, 28, 36
    pts = [p for s in series for p in s.points]
    if not pts:
        return f"<p>{html.escape(title)}: no data</p>"
    xt = nice_ticks(min(p[0] for p in pts), max(p[0] for p in pts))
    yt = nice_ticks(0.0, max(max(p[1] for p in pts), 1e-9))
    w, h = width - left - right, height - top - bottom

    def x(v: float) -> float:
        return left + (v - xt[0]) / (xt[-1] - xt[0]) * w

    def y(v: float) -> float:
        return top + h - (v - yt[0]) / (yt[-1] - yt[0]) * h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{html.escape(title)}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for v in yt:
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    for v in xt:
        out.append(f'<line x1="{x(v):.1f}" x2="{x(v):.1f}" y1="{top}" y2="{top + h}" stroke="#eee"/>'
                   f'<text x="{x(v):.1f}" y="{top + h + 14}" text-anchor="middle">{_fmt(v)}</text>')
    out.append(f'<text x="{left + w / 2}" y="{height - 4}" text-anchor="middle">hours from the start</text>'
               f'<text x="14" y="{top + h / 2}" transform="rotate(-90 14 {top + h / 2})" '
               f'text-anchor="middle">{html.escape(ylabel)}</text>'
               f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
    for i, s in enumerate(series):
        if not s.points:
            continue
        coords = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in s.points)
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        last = s.points[-1][1]
        out.append(f'<polyline fill="none" stroke="{s.colour}" stroke-width="1.6"{dash} points="{coords}">'
                   f'<title>{html.escape(s.label)}: {_fmt(last)} at the end</title></polyline>')
        ly = top + 8 + i * 14
        out.append(f'<line x1="{left + w + 10}" x2="{left + w + 34}" y1="{ly}" y2="{ly}" stroke="{s.colour}" '
                   f'stroke-width="2"{dash}/><text x="{left + w + 40}" y="{ly + 4}">{html.escape(s.label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _summary_rows(p: PolicyPrediction) -> str:
    last = p.days[-1]
    wa = "-" if p.write_amplification is None else f"{p.write_amplification:.2f}"
    cells = [html.escape(p.name), html.escape(p.source), " / ".join(str(last.files[k]) for k in LEVELS),
             f"{last.read_amplification:.2f} (max {last.read_amplification_max})", wa,
             f"{p.maintenance_tasks.get('cluster', 0)} / {p.maintenance_tasks.get('compact', 0)}",
             f"{last.history_hours:.1f}"]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def html_page(report: SimulationReport) -> str:
    """The whole report page: a summary table and the three charts, all inline."""
    pat = report.pattern
    head = (f"{html.escape(report.table_uri)}: {report.days} day(s) from {report.start:%Y-%m-%d %H:%M} UTC, "
            f"learned from {pat.period_hours:.1f} h of writes ({pat.commits} commits, "
            f"{pat.commits_per_hour:.1f}/h, key overlap {pat.key_overlap:.2f}); maintenance every "
            f"{report.schedule.maintenance_interval_seconds:.0f} s ({html.escape(report.schedule.source)})")
    rows = "\n".join(_summary_rows(p) for p in report.policies)
    charts = "\n".join(svg_chart(t, yl, s) for t, yl, s in _panels(report))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>maintd simulate {html.escape(report.table_uri)}</title>
<style>body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse;margin:12px 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}} td:first-child,th:first-child{{text-align:left}}</style>
</head><body>
<h1>maintd simulate</h1>
<p>{head}</p>
<table><tr><th>policy</th><th>source</th><th>files L0 / L1 / L2 / base (end)</th><th>read amplification (end)</th>
<th>write amplification</th><th>tasks cluster / compact</th><th>history kept (h)</th></tr>
{rows}
</table>
{charts}
</body></html>
"""


__all__ = ["FORMATS", "PLOT_EXTRA", "html_page", "nice_ticks", "plot_format", "require_matplotlib", "svg_chart",
           "write_plot"]
