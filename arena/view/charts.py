"""The evolve page's chart: held-out success per round with 95% intervals, as PNG bytes (matplotlib)."""

from __future__ import annotations

import io

from arena.view.queries import Round


def success_png(rounds: list[Round]) -> bytes:
    """Held-out success of each round with its 95% interval as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r.index for r in rounds]
    success = [float(r.eval.get("success", 0.0)) for r in rounds]
    low = [s - float(r.eval.get("ci95", [s, s])[0]) for s, r in zip(success, rounds, strict=True)]
    high = [float(r.eval.get("ci95", [s, s])[1]) - s for s, r in zip(success, rounds, strict=True)]
    fig, axes = plt.subplots(figsize=(5.5, 3.2))
    axes.errorbar(xs, success, yerr=[low, high], marker="o", capsize=4)
    for x, s in zip(xs, success, strict=True):
        axes.annotate(f"{s:.1%}", (x, s), textcoords="offset points", xytext=(6, 6), fontsize=8)
    top = max([s + h for s, h in zip(success, high, strict=True)], default=1.0)
    axes.set(xlabel="round", ylabel="held-out success", ylim=(0, min(1.0, top * 1.2 + 0.02)))
    axes.set_title("Held-out success per round (95% CI)", fontsize=10)
    axes.set_xticks(xs)
    axes.grid(alpha=0.3)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=90)
    plt.close(fig)
    return out.getvalue()
