"""The trade-off curve of ``maintd tune`` drawn as a PNG (matplotlib, the optional ``plot`` extra).

Read amplification (files a reader opens per bucket) against write amplification, one point per policy on the
curve, the current and the tuned policy marked, the declared ceilings drawn as dashed lines.
"""

from __future__ import annotations

from pathlib import Path

from maintd.errors import InvalidInputError
from maintd.simulate.plot import plot_format, require_matplotlib
from maintd.simulate.tune import TuneResult


def check_tune_plot(path: str | Path) -> None:
    """Refuse anything but a ``.png`` file name before any work is done, and a PNG without matplotlib."""
    if plot_format(path) != "png":
        raise InvalidInputError(f"--plot {path}: maintd tune draws its curve as a PNG; name the file .png")
    require_matplotlib()


def write_tune_plot(result: TuneResult, path: str | Path, title: str) -> None:
    check_tune_plot(path)
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


__all__ = ["check_tune_plot", "write_tune_plot"]
