"""Experiment tracking: ``none``, or Weights & Biases (offline unless an API key is set).

A tracker gets running episode metrics while a run plays, then the report: its headline as the run's
summary, its tables as ``wandb.Table`` and its plots as ``wandb.Image``.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any, Protocol

from arena.eval.report import ReportPaths


class Tracker(Protocol):
    def log_episode(self, done: int, fields: dict[str, Any]) -> None: ...

    def log_report(self, report: ReportPaths) -> None: ...

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None: ...

    def finish(self) -> None: ...


class NoTracker:
    """Tracks nothing."""

    def log_episode(self, done: int, fields: dict[str, Any]) -> None:
        return None

    def log_report(self, report: ReportPaths) -> None:
        return None

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        return None

    def finish(self) -> None:
        return None


class WandbTracker:
    """One wandb run per arena run, its files under ``out_dir/wandb``."""

    def __init__(self, settings: Any, run_id: str, config: dict[str, Any], out_dir: Path) -> None:
        import wandb

        mode = settings.mode
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        out_dir.mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        self.run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            name=run_id,
            id=run_id.replace("/", "-"),
            resume="allow",
            config=config,
            mode=mode,
            dir=str(out_dir),
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )

    def log_episode(self, done: int, fields: dict[str, Any]) -> None:
        self.run.log({"episodes": done, "success_so_far": fields["success"], "episodes_per_s": fields["eps"]})

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.run.log(metrics, step=step)

    def log_report(self, report: ReportPaths) -> None:
        data: dict[str, Any] = {
            f"report/{k}": v for k, v in report.headline.items() if not isinstance(v, list)
        }
        for path in report.tables:
            with path.open(encoding="utf-8") as handle:
                header, *rows = list(csv.reader(handle))
            if rows:  # wandb drops the whole log call of a table without rows
                data[f"table/{path.stem}"] = self._wandb.Table(columns=header, data=rows)
        for path in report.plots:
            data[f"plot/{path.stem}"] = self._wandb.Image(str(path))
        self.run.log(data)
        self.run.summary.update({k: v for k, v in report.headline.items() if not isinstance(v, list)})

    def finish(self) -> None:
        """End the run with its files complete on disk.

        ``run.finish()`` returns before wandb's service has flushed the run's ``.wandb`` file (seen: a
        header only, under load); ``teardown`` waits for the service to close every run and exit.
        """
        self.run.finish()
        self._wandb.teardown()


def open_tracker(settings: Any, run_id: str, config: dict[str, Any], out_dir: Path) -> Tracker:
    """The tracker ``settings.kind`` names (``none`` or ``wandb``)."""
    if settings.kind == "wandb":
        return WandbTracker(settings, run_id, config, out_dir)
    return NoTracker()
