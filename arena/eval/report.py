"""Evaluation reports: one run, or several compared, as Markdown and CSV tables and PNG plots.

Success is reported over scored episodes (tasks x repeats) with 95% Wilson intervals; infrastructure
failures are never scored and are counted apart; injected faults are the environment's behaviour and are
counted apart from both. Output is deterministic: the same store contents give byte-identical Markdown
and CSV on SQLite and PostgreSQL.
"""

from __future__ import annotations

import csv
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena.eval.stats import wilson_interval
from arena.store import EpisodeSummary, RunStore

Table = tuple[list[str], list[list[str]]]


@dataclass
class ReportPaths:
    """Where the report went, and its headline numbers (the CLI's last line)."""

    markdown: Path
    tables: list[Path] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    headline: dict[str, Any] = field(default_factory=dict)


def _rate(episodes: list[EpisodeSummary]) -> tuple[int, int, float, float, float]:
    scored = [e for e in episodes if e.passed is not None]
    passed = sum(bool(e.passed) for e in scored)
    low, high = wilson_interval(passed, len(scored))
    return len(scored), passed, passed / len(scored) if scored else 0.0, low, high


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def headline(episodes: list[EpisodeSummary]) -> dict[str, Any]:
    """Episodes, scored, success with its 95% interval, infrastructure errors, injected faults."""
    scored, _passed, success, low, high = _rate(episodes)
    return {
        "episodes": len(episodes),
        "scored": scored,
        "success": round(success, 4),
        "ci95": [round(low, 4), round(high, 4)],
        "infra_errors": len(episodes) - scored,
        "injected_faults": int(sum(e.metrics.get("injected_faults", 0) for e in episodes)),
    }


def infra_reason(message: str) -> str:
    """The gist of an infrastructure error: its text up to the details (an HTTP status is kept)."""
    head, _, rest = message.partition(": ")
    if rest.startswith("HTTP "):
        head += ": " + rest.split(":")[0]
    return head[:80]


def infra_reasons(episodes: list[EpisodeSummary], top: int = 3) -> list[tuple[str, int]]:
    """The most frequent infrastructure-error reasons with their counts (most frequent first)."""
    counts = Counter(infra_reason(e.infra_error or "unknown") for e in episodes if e.passed is None)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]


def _infra_errors(runs: dict[str, list[EpisodeSummary]]) -> Table:
    reasons = sorted({r for episodes in runs.values() for r, _n in infra_reasons(episodes, top=1000)})
    header = ["infrastructure error (not scored)", *runs]
    counts = {run: dict(infra_reasons(episodes, top=1000)) for run, episodes in runs.items()}
    return header, [[reason, *[str(counts[run].get(reason, 0)) for run in runs]] for reason in reasons]


def _grouped(runs: dict[str, list[EpisodeSummary]], key: Callable[[EpisodeSummary], str], name: str) -> Table:
    values = sorted({key(e) for episodes in runs.values() for e in episodes})
    header = [name] + [f"{run} success [95% CI] (n)" for run in runs]
    rows = []
    for value in values:
        row = [value]
        for episodes in runs.values():
            scored, _passed, success, low, high = _rate([e for e in episodes if key(e) == value])
            row.append(f"{_pct(success)} [{_pct(low)}, {_pct(high)}] ({scored})" if scored else "-")
        rows.append(row)
    return header, rows


def _failure_modes(runs: dict[str, list[EpisodeSummary]]) -> Table:
    modes = sorted({e.failure_mode for episodes in runs.values() for e in episodes})
    header = ["failure mode", *[f"{run} (share)" for run in runs]]
    rows = []
    for mode in modes:
        row = [mode]
        for episodes in runs.values():
            count = sum(e.failure_mode == mode for e in episodes)
            row.append(f"{count} ({_pct(count / len(episodes)) if episodes else '-'})")
        rows.append(row)
    return header, rows


def _efficiency(runs: dict[str, list[EpisodeSummary]]) -> Table:
    header = ["metric", *runs]
    metrics: list[tuple[str, Callable[[list[EpisodeSummary]], str]]] = [
        ("tool-error rate", lambda es: _share(es, "tool_errors", "tool_calls")),
        ("format-error rate (per turn)", lambda es: _share(es, "format_errors", "turns")),
        ("injected faults", lambda es: str(int(_sum(es, "injected_faults")))),
        ("infra errors (not scored)", lambda es: str(sum(e.passed is None for e in es))),
        ("turns (mean)", lambda es: f"{_mean(es, 'turns'):.2f}"),
        ("tool calls (mean)", lambda es: f"{_mean(es, 'tool_calls'):.2f}"),
        ("prompt tokens (mean)", lambda es: f"{_mean(es, 'prompt_tokens'):.0f}"),
        ("completion tokens (mean)", lambda es: f"{_mean(es, 'completion_tokens'):.0f}"),
        ("wall s per task p50", lambda es: f"{_percentile(_values(es, 'wall_s'), 0.5):.3f}"),
        ("wall s per task p99", lambda es: f"{_percentile(_values(es, 'wall_s'), 0.99):.3f}"),
        ("policy s per task (mean)", lambda es: f"{_mean(es, 'policy_s'):.3f}"),
        ("share of wall time waiting on tools", lambda es: _share(es, "tool_wait_s", "wall_s")),
    ]
    return header, [[name, *[fn(episodes) for episodes in runs.values()]] for name, fn in metrics]


def _values(episodes: list[EpisodeSummary], key: str) -> list[float]:
    return [float(e.metrics.get(key, 0.0)) for e in episodes if e.passed is not None]


def _sum(episodes: list[EpisodeSummary], key: str) -> float:
    return sum(float(e.metrics.get(key, 0.0)) for e in episodes)


def _mean(episodes: list[EpisodeSummary], key: str) -> float:
    values = _values(episodes, key)
    return statistics.fmean(values) if values else 0.0


def _share(episodes: list[EpisodeSummary], part: str, whole: str) -> str:
    total = _sum(episodes, whole)
    return _pct(_sum(episodes, part) / total) if total else "-"


def _markdown(table: Table) -> list[str]:
    header, rows = table
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(row) + " |" for row in rows
    ]


def _write_csv(path: Path, table: Table) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(table[0])
        writer.writerows(table[1])
    return path


def _plots(out_dir: Path, runs: dict[str, list[EpisodeSummary]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({e.env for episodes in runs.values() for e in episodes})
    width = 0.8 / max(1, len(runs))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, (run, episodes) in enumerate(runs.items()):
        rates = [_rate([e for e in episodes if e.env == env]) for env in envs]
        xs = [j + i * width for j in range(len(envs))]
        heights = [r[2] for r in rates]
        errors = [[r[2] - r[3] for r in rates], [r[4] - r[2] for r in rates]]
        left.bar(xs, heights, width, yerr=errors, capsize=3, label=run)
    left.set_xticks(
        [j + width * (len(runs) - 1) / 2 for j in range(len(envs))], envs, rotation=30, ha="right"
    )
    left.set(ylim=(0, 1.05), ylabel="success", title="Success by environment (95% CI)")
    left.legend(fontsize=7)
    modes = sorted({e.failure_mode for episodes in runs.values() for e in episodes})
    bottom = [0.0] * len(runs)
    for mode in modes:
        shares = [
            sum(e.failure_mode == mode for e in episodes) / max(1, len(episodes))
            for episodes in runs.values()
        ]
        right.bar(range(len(runs)), shares, bottom=bottom, label=mode)
        bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
    right.set_xticks(range(len(runs)), list(runs), rotation=15, ha="right", fontsize=7)
    right.set(ylabel="share of episodes", title="Failure modes")
    right.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "success_and_failures.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def write_report(store: RunStore, run_ids: list[str], out_dir: Path) -> ReportPaths:
    """Write the report of ``run_ids`` (one run, or a comparison of several) under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = {run_id: store.episodes(run_id) for run_id in run_ids}
    infos = {run_id: store.get(run_id) for run_id in run_ids}
    everything = [e for episodes in runs.values() for e in episodes]
    tables = {
        "overall": _grouped(runs, lambda e: "all", "scope"),
        "by_env": _grouped(runs, lambda e: e.env, "environment"),
        "by_category": _grouped(runs, lambda e: e.category or "-", "category"),
        "by_level": _grouped(runs, lambda e: str(e.level), "level"),
        "failure_modes": _failure_modes(runs),
        "efficiency": _efficiency(runs),
        "infra_errors": _infra_errors(runs),
    }
    paths = ReportPaths(markdown=out_dir / "report.md", headline=headline(everything))
    paths.tables = [_write_csv(out_dir / f"{name}.csv", table) for name, table in tables.items()]
    paths.plots = _plots(out_dir, runs)
    title = run_ids[0] if len(run_ids) == 1 else f"{len(run_ids)} runs compared"
    lines = [f"# Evaluation report: {title}", ""]
    for run_id, info in infos.items():
        lines.append(
            f"- `{run_id}`: policy {info.policy}, suite {info.suite}, {len(runs[run_id])} episodes, "
            f"status {info.status}, revision {info.git_revision or '-'}"
        )
    sections = [
        ("Success", "overall"),
        ("By environment", "by_env"),
        ("By category", "by_category"),
        ("By level", "by_level"),
        ("Failure modes", "failure_modes"),
        ("Errors, tokens, latency and waiting", "efficiency"),
    ]
    for title, name in sections:
        lines += ["", f"## {title}", "", *_markdown(tables[name])]
    if tables["infra_errors"][1]:
        lines += ["", "## Infrastructure errors (not scored, replayed by a re-run)", ""]
        lines += _markdown(tables["infra_errors"])
    lines += ["", *[f"![{p.stem}]({p.name})" for p in paths.plots], ""]
    paths.markdown.write_text("\n".join(lines), encoding="utf-8")
    return paths
