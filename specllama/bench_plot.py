"""Draw a bench result: speedup against draft length (one line per
temperature) and acceptance by draft position. Needs the ``plot`` extra."""

from __future__ import annotations

import os

from .bench import BenchResult
from .errors import SpecLlamaError


def check_plot_path(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise SpecLlamaError(f"cannot write the plot {path!r}: folder {folder!r} does not exist")
    if not path.lower().endswith(".png"):
        raise SpecLlamaError(f"the plot file must end in .png, got {path!r}")


def save_plot(result: BenchResult, path: str) -> None:
    check_plot_path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecLlamaError('--plot needs matplotlib: pip install "specllama[plot]"') from None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    temps = sorted({r.temperature for r in result.rows})
    for t in temps:
        rows = sorted((r for r in result.rows if r.temperature == t), key=lambda r: r.draft_max)
        ks = [r.draft_max for r in rows]
        line, = ax1.plot(ks, [r.speedup for r in rows], marker="o", label=f"temp {t:g} measured")
        ax1.plot(ks, [r.predicted_speedup for r in rows], ls="--", color=line.get_color(), alpha=0.6,
                 label=f"temp {t:g} predicted")
        longest = rows[-1]
        pos = list(range(len(longest.acceptance_by_position)))
        ax2.plot(pos, longest.acceptance_by_position, marker="o", color=line.get_color(),
                 label=f"temp {t:g}, k={longest.draft_max}")
    ax1.axhline(1.0, color="grey", lw=0.8)
    ax1.set_xlabel("draft length k (--draft-max)")
    ax1.set_ylabel("speedup over target-only")
    ax1.set_title("Speedup")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("draft position")
    ax2.set_ylabel("acceptance rate")
    ax2.set_ylim(0, 1.05)
    ax2.set_title("Acceptance by position")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
