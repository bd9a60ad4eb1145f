"""Small helpers shared by the benchmark scripts: percentiles and a printed table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def time_ms(fn: Callable[[], object], repeat: int) -> list[float]:
    """Wall time of ``repeat`` calls of ``fn``, in milliseconds."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


@dataclass
class Row:
    """One benchmark line: a figure, its target, and the baseline it is compared to."""

    metric: str
    p50: float | None
    p99: float | None = None
    unit: str = "ms"
    target: str = ""
    baseline_name: str = ""
    baseline: float | None = None
    lower_is_better: bool = True

    @classmethod
    def from_samples(cls, metric: str, samples: list[float], **kwargs: object) -> Row:
        return cls(metric, statistics.median(samples), percentile(samples, 99), **kwargs)  # type: ignore[arg-type]

    def ratio(self) -> str:
        if self.baseline is None or not self.p50:
            return ""
        ratio = self.baseline / self.p50 if self.lower_is_better else self.p50 / self.baseline
        return f"{ratio:.1f}x better" if ratio >= 1 else f"{1 / ratio:.1f}x worse"


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}" if value < 10 else f"{value:,.1f}"


def print_table(title: str, rows: list[Row]) -> None:
    table = Table(title=title)
    for column in ("metric", "median", "p99", "unit", "target", "baseline", "baseline value", "vs baseline"):
        table.add_column(column, justify="left" if column in ("metric", "target", "baseline") else "right")
    for r in rows:
        table.add_row(
            r.metric, _fmt(r.p50), _fmt(r.p99), r.unit, r.target, r.baseline_name, _fmt(r.baseline), r.ratio()
        )
    Console(width=200).print(table)
