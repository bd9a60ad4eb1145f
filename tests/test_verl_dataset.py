"""``arena tasks export --format verl``: stored tasks to parquet that verl's ``RLHFDataset`` loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset

from arena.cli.main import main
from arena.policies.tiny import build_tiny
from arena.rollout.episode import SYSTEM_PROMPT
from arena.store import Database, TaskStore
from task_synth.model import Task
from tests.hf_samples import SIZE
from tests.task_samples import every_kind, graph_task
from trainers.verl.dataset import split_of


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Task]:
    monkeypatch.setenv("ARENA_HOME", str(tmp_path))
    tasks = every_kind()
    db = Database()
    TaskStore(db).add(tasks)
    db.close()
    return tasks


def test_export_loads_through_rlhf_dataset(store: list[Task], tmp_path: Path) -> None:
    out = tmp_path / "verl"
    assert main(["tasks", "export", "--format", "verl", "--val-fraction", "0.5", str(out)]) == 0
    tokenizer = AutoTokenizer.from_pretrained(build_tiny(tmp_path / "tiny", [SYSTEM_PROMPT], SIZE))
    config = OmegaConf.create(
        {"prompt_key": "prompt", "return_raw_chat": True, "filter_overlong_prompts": False}
    )
    rows = {}
    for split in ("train", "val"):
        expected = [t for t in store if split_of(t.id, 0.5) == split]
        if not expected:
            continue
        data = RLHFDataset([str(out / f"{split}.parquet")], tokenizer, config)
        assert len(data) == len(expected)
        rows.update({data[i]["extra_info"]["task_id"]: data[i] for i in range(len(data))})
    assert sorted(rows) == sorted(t.id for t in store)  # every task once, in one split
    for task in store:
        row = rows[task.id]
        assert row["agent_name"] == "arena_agent" and row["data_source"] == f"arena/{task.env}"
        assert [m["role"] for m in row["raw_prompt"]] == ["system", "user"]
        assert row["raw_prompt"][1]["content"] == task.request
        assert Task.model_validate_json(row["extra_info"]["task"]) == task  # what the loop verifies with


def test_split_is_stable_and_near_the_fraction() -> None:
    ids = [f"task-{i}" for i in range(2000)]
    val = [i for i in ids if split_of(i, 0.1) == "val"]
    assert 150 < len(val) < 250
    assert val == [i for i in ids if split_of(i, 0.1) == "val"]
    assert split_of(graph_task().id, 0.0) == "train"


def test_export_errors_are_one_line(
    store: list[Task], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "x.jsonl"
    file.write_text("")
    assert main(["tasks", "export", "--format", "verl", str(file)]) == 2
    assert main(["tasks", "export", "--format", "verl", "--val-fraction", "1.5", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "writes a directory" in err and "--val-fraction must be in [0, 1)" in err
