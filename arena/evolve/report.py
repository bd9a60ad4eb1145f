"""The evolve report: held-out success per round with 95% intervals, by category and level, failure modes
per round, and what targeted synthesis asked for each round (Markdown, CSV and PNG)."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Any

from arena.eval.stats import wilson_interval
from arena.evolve.settings import BFCL_MULTI_TURN
from arena.store import EpisodeSummary, RunStore


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _cell(episodes: list[EpisodeSummary]) -> str:
    scored = [e for e in episodes if e.passed is not None]
    if not scored:
        return "-"
    passed = sum(bool(e.passed) for e in scored)
    low, high = wilson_interval(passed, len(scored))
    return f"{_pct(passed / len(scored))} [{_pct(low)}, {_pct(high)}] (n={len(scored)})"


def _by(rounds: list[list[EpisodeSummary]], key: str) -> list[str]:
    values = sorted({str(getattr(e, key)) for episodes in rounds for e in episodes})
    header = f"| {key} | " + " | ".join(f"round {r}" for r in range(len(rounds))) + " |"
    lines = [header, "|" + "---|" * (len(rounds) + 1)]
    for value in values:
        cells = [_cell([e for e in episodes if str(getattr(e, key)) == value]) for episodes in rounds]
        lines.append(f"| {value} | " + " | ".join(cells) + " |")
    return lines


def _plot(out_dir: Path, evals: list[dict[str, Any]], modes: list[Counter[str]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = list(range(len(evals)))
    success = [e["success"] for e in evals]
    errors = [
        [s - e["ci95"][0] for s, e in zip(success, evals, strict=True)],
        [e["ci95"][1] - s for s, e in zip(success, evals, strict=True)],
    ]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.errorbar(rounds, success, yerr=errors, marker="o", capsize=4, label="trained environments")
    if all("unseen" in e for e in evals):
        unseen = [e["unseen"]["success"] for e in evals]
        errors = [
            [s - e["unseen"]["ci95"][0] for s, e in zip(unseen, evals, strict=True)],
            [e["unseen"]["ci95"][1] - s for s, e in zip(unseen, evals, strict=True)],
        ]
        left.errorbar(
            rounds, unseen, yerr=errors, marker="x", capsize=4, linestyle="--", label="never trained on"
        )
        left.legend(fontsize=7)
    left.set(xlabel="round", ylabel="held-out success", title="Held-out success (95% CI)", ylim=(0, 1))
    left.set_xticks(rounds)
    names = sorted({m for counter in modes for m in counter})
    bottom = [0] * len(rounds)
    for name in names:
        heights = [counter.get(name, 0) for counter in modes]
        right.bar(rounds, heights, bottom=bottom, label=name)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    right.set(xlabel="round", ylabel="episodes", title="Failure modes")
    right.set_xticks(rounds)
    if names:
        right.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "evolve.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def write_evolve_report(runs: RunStore, run_id: str, stages: dict[str, Any], out_dir: Path) -> Path:
    """Write ``report.md``, ``rounds.csv`` and ``evolve.png`` under ``out_dir``; returns the Markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    from arena.evolve.loop import eval_stages

    evals = eval_stages(stages)
    count = len(evals)
    rounds = [runs.episodes(e["run_id"]) for e in evals]
    modes = [Counter(e.failure_mode for e in episodes if e.passed is not None) for episodes in rounds]
    sets = stages["sets"]
    lines = [
        f"# Evolve run `{run_id}`",
        "",
        f"{len(sets['train'])} training tasks, {len(sets['heldout'])} held-out tasks; overlap of task ids "
        f"{sets['overlap']['task_ids']}, of request texts {sets['overlap']['requests']}.",
        "",
        "## Held-out success per round",
        "",
        *(
            [
                f"Never trained on (warm start, synthesis): {', '.join(unseen)}; its held-out tasks apart.",
                "",
            ]
            if (unseen := sets.get("unseen_envs"))
            else []
        ),
        "| round | success | 95% CI | scored | never-trained environments | training |",
        "|---|---|---|---|---|---|",
    ]
    with (out_dir / "rounds.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["round", "success", "ci_low", "ci_high", "scored"])
        for r, e in enumerate(evals):
            trained = stages.get(f"train:{r}") or stages.get("warm_start:0" if r == 0 else "", {})
            summary = ", ".join(f"{k}={v:.3g}" for k, v in _flat(trained).items())
            lines.append(
                f"| {r} | {_pct(e['success'])} | [{_pct(e['ci95'][0])}, {_pct(e['ci95'][1])}] | "
                f"{e['scored']} | {_unseen(e)} | {summary} |"
            )
            writer.writerow(
                [r, f"{e['success']:.4f}", f"{e['ci95'][0]:.4f}", f"{e['ci95'][1]:.4f}", e["scored"]]
            )
    if base := stages.get("eval:base"):
        lines.append(
            f"| base (before any training) | {_pct(base['success'])} | [{_pct(base['ci95'][0])}, "
            f"{_pct(base['ci95'][1])}] | {base['scored']} | {_unseen(base)} | |"
        )
    if pair := stages.get("paired_vs_round0"):
        lines += [
            "",
            f"Last round vs round 0 on the same {pair['tasks']} tasks: {pair['gained']} gained, "
            f"{pair['lost']} lost (exact McNemar p = {pair['p_value']:.3g}).",
        ]
    lines += _benchmarks(stages, count)
    lines += [
        "",
        "## By category",
        "",
        *_by(rounds, "category"),
        "",
        "## By level",
        "",
        *_by(rounds, "level"),
    ]
    names = sorted({m for counter in modes for m in counter})
    lines += [
        "",
        "## Failure modes per round",
        "",
        "| mode | " + " | ".join(f"round {r}" for r in range(count)) + " |",
    ]
    lines.append("|" + "---|" * (count + 1))
    lines += [f"| {m} | " + " | ".join(str(c.get(m, 0)) for c in modes) + " |" for m in names]
    lines += ["", "## What targeted synthesis asked for", ""]
    for r in range(1, count):
        targeted = stages.get(f"targeted:{r}", {})
        lines.append(
            f"Round {r} ({len(targeted.get('tasks', []))} tasks, mode {targeted.get('mode', 'gap')}):"
        )
        lines += [f"- {batch['reason']}" for batch in targeted.get("batches", [])]
        lines += [
            f"- (gap targeting would have asked) {b['reason']}" for b in targeted.get("gap_batches", [])
        ]
        weak = targeted.get("gaps", {}).get("weak_spots", [])[:3]
        lines += [
            f"  - weak spot: {w['env']} level {w['level']} ({w['failure_mode']}, "
            f"success {_pct(w['success'])})"
            for w in weak
        ]
        lines.append("")
    plots = _plot(out_dir, evals, modes) if evals else []
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _interval(rate: dict[str, Any]) -> str:
    return f"{_pct(rate['success'])} [{_pct(rate['ci95'][0])}, {_pct(rate['ci95'][1])}] (n={rate['scored']})"


def _benchmarks(stages: dict[str, Any], count: int) -> list[str]:
    """A table per fixed benchmark played every round: overall and per category, 95% intervals."""
    lines: list[str] = []
    for name in sorted({k.split(":")[0] for k in stages if k.startswith(f"{BFCL_MULTI_TURN}:")}):
        played = {r: stages[f"{name}:{r}"] for r in range(count) if f"{name}:{r}" in stages}
        categories = sorted({c for b in played.values() for c in b["by_category"]})
        lines += [
            "",
            f"## {name} (fixed tasks every round, never trained on)",
            "",
            "| round | all | " + " | ".join(categories) + " | wall |",
            "|" + "---|" * (len(categories) + 3),
        ]
        for r, b in played.items():
            cells = [_interval(b["by_category"][c]) if c in b["by_category"] else "-" for c in categories]
            lines.append(f"| {r} | {_interval(b)} | " + " | ".join(cells) + f" | {b.get('wall_s', '-')} s |")
    return lines


def _unseen(evaluation: dict[str, Any]) -> str:
    if "unseen" not in evaluation:
        return "-"
    return _interval(evaluation["unseen"])


def _flat(metrics: Any, prefix: str = "") -> dict[str, float]:
    if isinstance(metrics, dict):
        out: dict[str, float] = {}
        for key, value in metrics.items():
            out |= _flat(value, f"{prefix}{key}.")
        return out
    if isinstance(metrics, int | float) and not isinstance(metrics, bool):
        return {prefix.rstrip("."): float(metrics)}
    return {}
