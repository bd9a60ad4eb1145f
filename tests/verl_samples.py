"""What the verl tests share: the arena's verl config composed for a tiny model, a scripted rollout server
behind verl's own router and ``LLMServerClient`` (a Ray actor serving token ids, as verl's agent-loop
tests serve them), and tasks whose request tells the script how to play."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ray
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from transformers import AutoTokenizer
from verl.workers.rollout.replica import TokenOutput

from arena.cli.hydra_config import CONF_DIR
from task_synth.model import Task

ROOT = Path(__file__).parents[1]
LOGPROB = -0.25
MODE = re.compile(r"\[scripted: (\w+)\]")


def verl_config(model_dir: Path, train_files: Path, pool_name: str, *overrides: str) -> DictConfig:
    """``conf/train.yaml`` (verl's ppo_trainer + the arena's defaults) for a tiny model on CPU."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        config = compose(
            "train",
            overrides=[
                f"model.path={model_dir}",
                f"data.train_files={train_files}",
                "data.max_prompt_length=1024",
                "data.max_response_length=512",
                f"arena.pool_name={pool_name}",
                "arena.retry_delay_s=0.5",
                *overrides,
            ],
        )
    OmegaConf.resolve(config)
    return config


@ray.remote
class ScriptedServer:
    """A rollout server replaying a script, token-in/token-out. The task's request says how to play:
    ``[scripted: correct]`` calls get_book then answers the copy count, ``wrong`` answers one more,
    ``tool_error`` first calls get_book with a bad id, ``crash`` raises, ``die`` kills the server,
    ``alternate`` plays ``correct`` and ``wrong`` by turns over trajectories (a GRPO group with both
    verdicts). Its replies carry ``global_steps``, the weight version ``set_weights_version`` gave it
    (None, as a fresh vLLM server, until then)."""

    def __init__(self, model_dir: str, copies: int) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.copies = copies
        self.replies: list[str] = []
        self.alternates: dict[str, str] = {}
        self.weights_version: int | None = None

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        text = self.tokenizer.decode(prompt_ids)
        mode = MODE.search(text)
        play = mode.group(1) if mode else "correct"
        if play == "alternate":
            turns = ("correct", "wrong")
            play = self.alternates.setdefault(request_id, turns[len(self.alternates) % 2])
        results = text.count("<|tool|>")
        if play == "crash":
            raise RuntimeError("scripted crash")
        if play == "die":
            os._exit(1)
        book = {"name": "get_book", "arguments": {"book_id": 1}}
        if play == "tool_error" and results == 0:
            reply = (
                "<tool_call>"
                + json.dumps({"name": "get_book", "arguments": {"book_id": -5}})
                + "</tool_call>"
            )
        elif results == (1 if play != "tool_error" else 2) or results > 2:
            reply = json.dumps({"copies": self.copies + (play == "wrong")})
        else:
            reply = "<tool_call>" + json.dumps(book) + "</tool_call>"
        self.replies.append(reply)
        ids = [*self.tokenizer.encode(reply, add_special_tokens=False), self.tokenizer.eos_token_id]
        return TokenOutput(
            token_ids=ids,
            log_probs=[LOGPROB] * len(ids),
            stop_reason="completed",
            extra_fields={"global_steps": self.weights_version},
        )

    def set_weights_version(self, version: int) -> None:
        self.weights_version = version

    def history(self) -> list[str]:
        return list(self.replies)


def scripted_tasks(task: Task, plays: list[str]) -> list[Task]:
    """``task`` once per play, its request tagged with the play (distinct ids)."""
    return [
        task.model_copy(update={"request": f"{task.request} [scripted: {p}]", "id": ""}).with_id()
        for p in plays
    ]


def run_isolated(
    args: list[str], timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python args`` from the repository in its own process group (``env`` added to this one's),
    killed with everything it started (its Ray) on timeout; stderr joins stdout."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        text=True,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout_s:.0f} s:\n{out[-4000:]}")
    return subprocess.CompletedProcess(args, proc.returncode, out)
