"""Tasks as verl's RL parquet: one row per task, split into train and validation by a stable hash.

Columns (what ``verl.utils.dataset.RLHFDataset`` reads): ``prompt`` (the chat messages the episode starts
with: the arena's system prompt and the task's request), ``data_source`` (``arena/<env>``), ``agent_name``
(``arena_agent``: verl runs that loop for the row), ``ability``, ``reward_model`` (the verifier runs in the
loop, so only a marker), and ``extra_info`` with ``index``, ``task_id``, ``env`` and the whole task as
JSON (``task``): the loop needs nothing but the row to lease, run and verify.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from arena.rollout.episode import SYSTEM_PROMPT
from task_synth.model import Task

AGENT_NAME = "arena_agent"
"""The agent loop every exported row runs (``trainers.verl.agent_loop``)."""


def split_of(task_id: str, val_fraction: float) -> str:
    """``"val"`` or ``"train"``, from a hash of the task id (stable across runs, machines, orders)."""
    bucket = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big") / 2**64
    return "val" if bucket < val_fraction else "train"


def row(task: Task, index: int, system_prompt: str = SYSTEM_PROMPT) -> dict[str, Any]:
    """One task as one verl row."""
    return {
        "data_source": f"arena/{task.env}",
        "agent_name": AGENT_NAME,
        "prompt": [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": task.request},
        ],
        "ability": str(task.kind),
        "reward_model": {"style": "arena_verifier", "ground_truth": task.id},
        "extra_info": {
            "index": index,
            "task_id": task.id,
            "env": task.env,
            "difficulty": task.difficulty,
            "task": task.model_dump_json(),
        },
    }


def export(tasks: Iterable[Task], out_dir: Path, val_fraction: float = 0.1) -> dict[str, int]:
    """Write ``train.parquet`` and ``val.parquet`` to ``out_dir``; the row count of each."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    rows: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for task in tasks:
        split = rows[split_of(task.id, val_fraction)]
        split.append(row(task, len(split)))
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, items in rows.items():
        pq.write_table(pa.Table.from_pylist(items), out_dir / f"{split}.parquet")
    return {split: len(items) for split, items in rows.items()}
