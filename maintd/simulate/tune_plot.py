"""The trade-off curve of ``maintd tune``, drawn in the formats of ``maintd simulate``'s plots (chosen by the file
name): ``.png`` (matplotlib, the optional ``plot`` extra) or ``.html``, a self-contained page of inline SVG.

Read amplification (files a reader opens per bucket) against write amplification, one point per policy on the
curve, the current and the tuned policy marked, the declared ceilings drawn as dashed lines.
"""

from __future__ import annotations

import html
from pathlib import Path

from maintd.simulate.plot import nice_ticks, plot_format, require_matplotlib
from maintd.simulate.tune import TuneResult


def check_tune_plot(path: str | Path) -> None:
    """Refuse an unknown plot format before any work is done, and a PNG without matplotlib."""
    if plot_format(path) == "png":
        require_matplotlib()


def write_tune_plot(result: TuneResult, path: str | Path, title: str) -> None:
    """Draw ``result``'s curve into ``path`` (``.png`` or ``.html``)."""
    check_tune_plot(path)
    if plot_format(path) == "html":
        Path(path).write_text(tune_html(result, title), encoding="utf-8")
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    curve = [p for p in result.curve]
    ax.plot([p[0] for p in curve], [p[1] for p in curve], "o-", color="#7f7f7f", label="trade-off curve")
    cur, new = result.current_predicted, result.predicted
    ax.plot([cur["read_files_per_bucket"]], [cur["write_amplification"]], "s", color="#d62728", markersize=10,
            label="current")
    ax.plot([new["read_files_per_bucket"]], [new["write_amplification"]], "*", color="#2ca02c", markersize=16,
            label="tuned")
    declared = result.targets.declared()
    if "read_files_per_bucket" in declared:
        ax.axvline(declared["read_files_per_bucket"], color="#1f77b4", linestyle="--", label="read files target")
    if "write_amplification" in declared:
        ax.axhline(declared["write_amplification"], color="#9467bd", linestyle="--", label="write amp. target")
    ax.set_xlabel("files a reader opens per bucket (p95)")
    ax.set_ylabel("write amplification")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(Path(path), dpi=110)
    plt.close(fig)


def tune_html(result: TuneResult, title: str, *, width: int = 760, height: int = 460) -> str:
    """A self-contained page: the curve as inline SVG (a tooltip per point), then the points as a table."""
    left, right, top, bottom = 64, 24, 34, 46
    cur, new = result.current_predicted, result.predicted
    declared = result.targets.declared()
    xs = [p[0] for p in result.curve] + [cur["read_files_per_bucket"], new["read_files_per_bucket"]]
    ys = [p[1] for p in result.curve] + [cur["write_amplification"], new["write_amplification"]]
    xs += [declared["read_files_per_bucket"]] if "read_files_per_bucket" in declared else []
    ys += [declared["write_amplification"]] if "write_amplification" in declared else []
    xt, yt = nice_ticks(0.0, max(max(xs), 1.0)), nice_ticks(0.0, max(max(ys), 1e-9))
    w, h = width - left - right, height - top - bottom

    def x(v: float) -> float:
        return left + (v - xt[0]) / (xt[-1] - xt[0]) * w

    def y(v: float) -> float:
        return top + h - (v - yt[0]) / (yt[-1] - yt[0]) * h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{html.escape(title)}" font-family="sans-serif" font-size="11">',
           f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    out += [f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>' for v in yt]
    out += [f'<text x="{x(v):.1f}" y="{top + h + 14}" text-anchor="middle">{v:g}</text>' for v in xt]
    out.append(f'<text x="{left + w / 2}" y="{height - 8}" text-anchor="middle">files a reader opens per bucket '
               f'(p95)</text><text x="14" y="{top + h / 2}" transform="rotate(-90 14 {top + h / 2})" '
               f'text-anchor="middle">write amplification</text>')
    if "read_files_per_bucket" in declared:
        v = x(declared["read_files_per_bucket"])
        out.append(f'<line x1="{v:.1f}" x2="{v:.1f}" y1="{top}" y2="{top + h}" stroke="#1f77b4" '
                   f'stroke-dasharray="6 3"><title>read files target</title></line>')
    if "write_amplification" in declared:
        v = y(declared["write_amplification"])
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{v:.1f}" y2="{v:.1f}" stroke="#9467bd" '
                   f'stroke-dasharray="6 3"><title>write amp. target</title></line>')
    coords = " ".join(f"{x(p[0]):.1f},{y(p[1]):.1f}" for p in result.curve)
    out.append(f'<polyline fill="none" stroke="#7f7f7f" stroke-width="1.5" points="{coords}"/>')
    for a, b, _, label in result.curve:
        out.append(f'<circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="4" fill="#7f7f7f"><title>{html.escape(label)}: '
                   f'{a:g} files, write amp. {b:.2f}</title></circle>')
    for name, m, colour in (("current", cur, "#d62728"), ("tuned", new, "#2ca02c")):
        out.append(f'<rect x="{x(m["read_files_per_bucket"]) - 6:.1f}" y="{y(m["write_amplification"]) - 6:.1f}" '
                   f'width="12" height="12" fill="none" stroke="{colour}" stroke-width="2"><title>{name}</title>'
                   f'</rect>')
    out.append("</svg>")
    rows = "".join(f"<tr><td>{a:g}</td><td>{b:.2f}</td><td>{c}</td><td>{html.escape(label)}</td></tr>"
                   for a, b, c, label in result.curve)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>
<body style="font-family: sans-serif">
<h1 style="font-size: 16px">{html.escape(title)}</h1>
<p>{html.escape(result.reason)}</p>
{chr(10).join(out)}
<table border="1" cellpadding="4" style="border-collapse: collapse">
<tr><th>read files/bucket</th><th>write amp.</th><th>bytes rewritten</th><th>policy</th></tr>{rows}
</table>
<p>current: red square; tuned: green square; dashed: the declared ceilings.</p>
</body></html>
"""


__all__ = ["check_tune_plot", "tune_html", "write_tune_plot"]
