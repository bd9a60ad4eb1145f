"""Reports from stored runs (tables, CSV, plots, deterministic), and wandb tracking in offline mode."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from arena.eval.report import infra_reasons, write_report
from arena.eval.settings import TrackerSettings
from arena.eval.stats import wilson_interval
from arena.eval.tracker import open_tracker
from arena.rollout.records import EpisodeRecord, FailureMode, ToolCallRecord, TurnRecord
from arena.store import Database, RunStore
from task_synth.model import Verdict


def _episode(task: str, env: str, level: int, passed: bool | None, mode: FailureMode) -> EpisodeRecord:
    call = ToolCallRecord("c1", "get_book", {"book_id": 1}, {"id": 1}, None if passed else "NOT_FOUND", 0.01)
    turns = [TurnRecord(0, None, [call], user_message="q", tool_wait_s=0.01), TurnRecord(1, '{"a": 1}')]
    verdict = None if passed is None else Verdict(passed=passed, criteria={"field:a": passed})
    infra = "[worker_died] gone" if passed is None else None
    return EpisodeRecord(task, env, level, "graph", 0, mode, verdict, {"a": 1}, turns, infra, True, 0.05)


def fill(store: RunStore) -> None:
    """Two runs: one strong, one weak with an infrastructure error (never scored)."""
    for run, outcomes in {
        "strong": [True, True, True, False],
        "weak": [False, True, None, False],
    }.items():
        store.start(run, policy=run, suite="core", config={}, git_revision=None, planned=4)
        for i, passed in enumerate(outcomes):
            mode = {True: FailureMode.SOLVED, False: FailureMode.WRONG_ANSWER, None: FailureMode.INFRA_ERROR}
            env = "library" if i % 2 else "banking"
            store.record(run, _episode(f"t{i}", env, 1 + i % 2, passed, mode[passed]), "education")
        store.finish(run, "finished", {})


def test_report_tables_plots_and_headline(tmp_path: Path) -> None:
    store = RunStore(Database(f"sqlite:///{tmp_path / 'r.db'}"))
    fill(store)
    single = write_report(store, ["weak"], tmp_path / "weak")
    assert single.headline["episodes"] == 4 and single.headline["scored"] == 3
    assert single.headline["infra_errors"] == 1 and single.headline["success"] == round(1 / 3, 4)
    assert single.headline["ci95"] == [round(x, 4) for x in wilson_interval(1, 3)]
    by_env = list(csv.reader((tmp_path / "weak" / "by_env.csv").open()))
    assert by_env[0][0] == "environment" and [row[0] for row in by_env[1:]] == ["banking", "library"]
    assert by_env[2][1].startswith("50.0%") and by_env[2][1].endswith("(2)")  # library: 1 of 2 scored
    modes = (tmp_path / "weak" / "failure_modes.csv").read_text()
    assert "infra_error,1 (25.0%)" in modes and "wrong_answer,2 (50.0%)" in modes
    text = single.markdown.read_text()
    assert "## By level" in text and "success_and_failures.png" in text
    assert all(p.stat().st_size > 1000 for p in single.plots)

    write_report(store, ["strong", "weak"], tmp_path / "both")
    overall = list(csv.reader((tmp_path / "both" / "overall.csv").open()))
    assert overall[1][1].startswith("75.0%") and overall[1][2].startswith("33.3%")
    write_report(store, ["strong", "weak"], tmp_path / "again")
    for name in ("report.md", "by_env.csv", "efficiency.csv"):
        assert (tmp_path / "both" / name).read_text() == (tmp_path / "again" / name).read_text()


def test_infrastructure_errors_are_listed_apart_with_their_reasons(tmp_path: Path) -> None:
    store = RunStore(Database(f"sqlite:///{tmp_path / 'r.db'}"))
    store.start("down", policy="openai", suite="core", config={}, git_revision=None, planned=4)
    errors = [
        "policy endpoint unreachable: Connection error.",
        "policy endpoint unreachable: Request timed out.",
        "policy endpoint failed: HTTP 503: loading model",
        None,
    ]
    for i, error in enumerate(errors):
        mode = FailureMode.SOLVED if error is None else FailureMode.INFRA_ERROR
        record = _episode(f"t{i}", "library", 1, True if error is None else None, mode)
        record.infra_error = error
        store.record("down", record, "education")
    store.finish("down", "finished", {})
    assert infra_reasons(store.episodes("down")) == [
        ("policy endpoint unreachable", 2),
        ("policy endpoint failed: HTTP 503", 1),
    ]
    report = write_report(store, ["down"], tmp_path / "down")
    text = report.markdown.read_text()
    assert report.headline["infra_errors"] == 3 and report.headline["success"] == 1.0
    section = text.split("## Infrastructure errors (not scored, replayed by a re-run)")[1]
    assert "| policy endpoint unreachable | 2 |" in section
    assert "| policy endpoint failed: HTTP 503 | 1 |" in section
    assert "status finished" in text
    fill(store)
    clean = write_report(store, ["strong"], tmp_path / "strong").markdown.read_text()
    assert "## Infrastructure errors" not in clean


def test_wandb_offline_run_holds_the_metrics_tables_and_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    store = RunStore(Database(f"sqlite:///{tmp_path / 'r.db'}"))
    fill(store)
    out = tmp_path / "strong"
    tracker = open_tracker(TrackerSettings(kind="wandb"), "strong", {"policy": "strong"}, out)
    tracker.log_episode(1, {"success": 1.0, "infra": 0, "eps": 2.0})
    report = write_report(store, ["strong"], out)
    tracker.log_report(report)
    tracker.finish()
    runs = list((out / "wandb").glob("offline-run-*-strong"))
    assert len(runs) == 1
    history = (runs[0] / "run-strong.wandb").read_bytes()
    assert b"success_so_far" in history and b"report/success" in history
    table = next((runs[0] / "files" / "media" / "table").rglob("by_env_*.table.json"))
    logged = json.loads(table.read_text())
    header, *rows = list(csv.reader((out / "by_env.csv").open()))
    assert logged["columns"] == header and logged["data"] == rows
    assert list((runs[0] / "files" / "media" / "images").rglob("success_and_failures_*.png"))


def test_runs_one_after_another_in_one_process_each_end_with_their_metrics_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's runs share a process: each ``finish`` leaves its run complete, the next one starts."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    for run_id in ("first", "second"):
        tracker = open_tracker(TrackerSettings(kind="wandb"), run_id, {}, tmp_path / run_id)
        tracker.log_metrics({f"{run_id}_metric": 1.0})
        tracker.finish()
        (run,) = (tmp_path / run_id / "wandb").glob(f"offline-run-*-{run_id}")
        assert f"{run_id}_metric".encode() in (run / f"run-{run_id}.wandb").read_bytes()
