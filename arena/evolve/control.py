"""Gap-targeted vs uniform synthesis from the same round 0 (the control of docs/evolve.md): each arm's
held-out success per round (mean over seeds), the paired difference over held-out tasks with its 95%
interval and exact McNemar p-value, the environments never trained on, and the tokens each arm trained on;
as a dict (the benchmark's JSON line), a Markdown report and a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena.evolve.loop import eval_stages, tokens_per_round
from arena.evolve.paired import arm_difference, outcomes
from arena.store import RunStore

ARMS = ("gap", "uniform")


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 4) if known else None


def _arm(runs: RunStore, run_ids: list[str]) -> dict[str, Any]:
    """Per seed: the evaluations' outcomes on seen and unseen environments, the tokens per round."""
    seen: list[list[dict[str, bool]]] = []  # [seed][round] task -> passed
    unseen: list[list[float | None]] = []
    tokens: list[list[int | None]] = []
    for run_id in run_ids:
        stages = (runs.get(run_id).summary or {}).get("stages", {})
        hidden = set(stages["sets"].get("unseen_envs", []))
        evals = eval_stages(stages)
        seen.append(
            [outcomes([e for e in runs.episodes(ev["run_id"]) if e.env not in hidden]) for ev in evals]
        )
        unseen.append([ev["unseen"]["success"] if "unseen" in ev else None for ev in evals])
        tokens.append(tokens_per_round(stages))
    return {"seen": seen, "unseen": unseen, "tokens": tokens}


def compare(runs: RunStore, arms: dict[str, list[str]]) -> dict[str, Any]:
    """The comparison of the ``gap`` and ``uniform`` arms (evolve run ids, one per seed, same order of
    seeds in both): the benchmark's JSON fields and the per-round detail the report shows."""
    data = {mode: _arm(runs, arms[mode]) for mode in ARMS}
    rounds = min(len(per_seed) for d in data.values() for per_seed in d["seen"]) - 1
    out: dict[str, Any] = {"rounds": rounds, "seeds": min(len(arms[m]) for m in ARMS)}
    for mode in ARMS:
        d = data[mode]
        out[f"{mode}_success_per_round"] = [
            _mean([sum(s[r].values()) / len(s[r]) if s[r] else None for s in d["seen"]])
            for r in range(rounds + 1)
        ]
        out[f"{mode}_unseen_success_per_round"] = [
            _mean([u[r] for u in d["unseen"]]) for r in range(rounds + 1)
        ]
        out[f"tokens_{mode}"] = [_mean([t[r] for t in d["tokens"]]) for r in range(1, rounds + 1)]
    differences = [
        arm_difference([s[r] for s in data["gap"]["seen"]], [s[r] for s in data["uniform"]["seen"]]).to_json()
        for r in range(1, rounds + 1)
    ]
    out["difference_per_round"] = [d["difference"] for d in differences]
    out["difference_ci95"] = [d["ci95"] for d in differences]
    out["p_value_per_round"] = [d["p_value"] for d in differences]
    out["p_value"] = differences[-1]["p_value"] if differences else None
    out["paired_last_round"] = differences[-1] if differences else None
    out["tokens_ratio_uniform_to_gap"] = [
        round(u / g, 4) if u is not None and g else None
        for u, g in zip(out["tokens_uniform"], out["tokens_gap"], strict=True)
    ]
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """Per round: each arm's success (seen environments, then unseen), the difference and its interval,
    p, and the tokens each arm trained on."""
    rows = []
    for r in range(result["rounds"] + 1):
        diff = (
            f"{100 * result['difference_per_round'][r - 1]:+.1f} "
            f"[{100 * result['difference_ci95'][r - 1][0]:+.1f}, "
            f"{100 * result['difference_ci95'][r - 1][1]:+.1f}]"
            if r
            else "(same round 0)"
        )
        rows.append(
            [
                str(r),
                _pct(result["gap_success_per_round"][r]),
                _pct(result["uniform_success_per_round"][r]),
                diff,
                f"{result['p_value_per_round'][r - 1]:.3g}" if r else "",
                _pct(result["gap_unseen_success_per_round"][r]),
                _pct(result["uniform_unseen_success_per_round"][r]),
                f"{result['tokens_gap'][r - 1]:,.0f}" if r and result["tokens_gap"][r - 1] else "",
                f"{result['tokens_uniform'][r - 1]:,.0f}" if r and result["tokens_uniform"][r - 1] else "",
            ]
        )
    return rows


HEADER = [
    "round",
    "gap",
    "uniform",
    "gap - uniform, points [95% CI]",
    "p (McNemar)",
    "gap unseen",
    "uniform unseen",
    "tokens gap",
    "tokens uniform",
]


def write_control_report(result: dict[str, Any], arms: dict[str, list[str]], out_dir: Path) -> Path:
    """``control.md`` and ``control.png`` under ``out_dir``; returns the Markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Gap-targeted vs uniform synthesis, from the same round 0",
        "",
        f"{result['seeds']} seeds per arm (synthesis and sampling); held-out success on the trained "
        "environments (mean over seeds), the difference paired over held-out tasks (normal 95% interval "
        "over tasks) and the exact McNemar test on discordant (task, seed) pairs; environments never "
        "trained on apart. Runs: " + "; ".join(f"{mode}: {', '.join(ids)}" for mode, ids in arms.items()),
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
        *("| " + " | ".join(row) + " |" for row in table_rows(result)),
        "",
        "![control](control.png)",
    ]
    _plot(result, out_dir / "control.png")
    path = out_dir / "control.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = list(range(result["rounds"] + 1))
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, colour in zip(ARMS, ("tab:blue", "tab:orange"), strict=True):
        ax.plot(rounds, result[f"{mode}_success_per_round"], marker="o", color=colour, label=f"{mode} (seen)")
        unseen = result[f"{mode}_unseen_success_per_round"]
        if any(u is not None for u in unseen):
            ax.plot(rounds, unseen, marker="x", linestyle="--", color=colour, label=f"{mode} (unseen env)")
    ax.set(xlabel="round", ylabel="held-out success", title="Gap-targeted vs uniform", ylim=(0, 1))
    ax.set_xticks(rounds)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
