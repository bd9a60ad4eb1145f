"""An environment written outside the repository, used as a new user would: the real `arena` command in a
subprocess, from an unrelated working directory, first by path and then by a name registered once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from environments.registry import load_path
from environments.sdk.testing import EnvHarness
from task_synth.model import Task
from task_synth.program import execute
from task_synth.runner import StepOutcome

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def arena(*args: str, cwd: Path, env: dict[str, str], timeout: int = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arena.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


class _HarnessRunner:
    """Runs a reference solution in-process on a fresh state, to learn the calls a correct agent makes."""

    def __init__(self, harness: EnvHarness) -> None:
        self.harness = harness

    async def call(self, tool: str, arguments: dict[str, Any]) -> StepOutcome:
        outcome = self.harness.outcome(tool, **arguments)
        return StepOutcome(outcome.ok, outcome.value)


def _correct_submission(task: Task, env_dir: Path) -> dict[str, Any]:
    with EnvHarness(load_path(env_dir)) as harness:
        run = asyncio.run(execute(task.solution, _HarnessRunner(harness)))  # type: ignore[arg-type]
    calls = [{"tool": tool, "arguments": arguments} for tool, arguments in run.calls]
    return {"answer": run.answer, "calls": calls}


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """``envs/`` (where the environment lives), ``elsewhere/`` (the working directory) and a process
    environment with the project importable but nothing registered."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("ARENA_ENV_PATH", "PYTHONPATH")}
    env |= {"PYTHONPATH": str(ROOT), "ARENA_HOME": str(home), "RAY_AUTH_MODE": "disabled"}
    return tmp_path / "envs", tmp_path / "elsewhere", env


def _state_task(store: str, cwd: Path, env: dict[str, str]) -> Task:
    listed = arena("tasks", "list", "--store", store, "--kind", "state", "--json", cwd=cwd, env=env)
    assert listed.returncode == 0, listed.stderr
    tasks = [Task.model_validate(t) for t in json.loads(listed.stdout)]
    assert tasks, "synthesis kept no state task"
    return tasks[0]


def test_outside_environment_by_path_then_by_registered_name(
    workspace: tuple[Path, Path, dict[str, str]],
) -> None:
    envs, cwd, env = workspace
    made = arena("env", "new", "vetclinic", "--dir", str(envs), cwd=cwd, env=env)
    assert made.returncode == 0, made.stderr
    env_dir = envs / "vetclinic"
    relative = os.path.relpath(env_dir, cwd)

    checked = arena("env", "check", relative, cwd=cwd, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "read-only tools do not write" in checked.stdout

    store = f"sqlite:///{cwd / 'tasks.db'}"
    synth = arena(
        "synth", f"env={relative}", "n=10", "difficulty=[1,2]", f"store.url={store}", cwd=cwd, env=env
    )
    assert synth.returncode == 0, synth.stdout[-2000:] + synth.stderr[-2000:]
    task = _state_task(store, cwd, env)
    assert task.env == "vetclinic" and task.provenance["env_source"] == str(env_dir.resolve())
    answer = cwd / "answer.json"
    answer.write_text(json.dumps(_correct_submission(task, env_dir)))
    wrong = cwd / "wrong.json"
    wrong.write_text(json.dumps({"answer": task.reference_answer or {}, "calls": []}))

    # Not registered: the stored name alone is not enough, and the error says what to do.
    refused = arena("tasks", "verify", task.id, "--store", store, "--answer", str(answer), cwd=cwd, env=env)
    assert (
        refused.returncode == 2
        and "--env" in refused.stderr
        and len(refused.stderr.strip().splitlines()) == 1
    )
    by_path = arena(
        "tasks",
        "verify",
        task.id,
        "--store",
        store,
        "--answer",
        str(answer),
        "--env",
        str(env_dir),
        cwd=cwd,
        env=env,
    )
    assert by_path.returncode == 0 and "PASS" in by_path.stdout, by_path.stdout + by_path.stderr
    demo = arena("demo", "--env", relative, cwd=cwd, env=env)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]

    # Registered once (a config key in $ARENA_HOME): the name works everywhere, pool workers included.
    Path(env["ARENA_HOME"]).mkdir(exist_ok=True)
    (Path(env["ARENA_HOME"]) / "config.toml").write_text(f'environment_paths = ["{envs}"]\n')
    listed = arena("env", "list", "--json", cwd=cwd, env=env)
    assert "vetclinic" in {row["name"] for row in json.loads(listed.stdout)}
    assert arena("env", "check", "vetclinic", "--no-tests", cwd=cwd, env=env).returncode == 0
    passed = arena("tasks", "verify", task.id, "--store", store, "--answer", str(answer), cwd=cwd, env=env)
    assert passed.returncode == 0 and "PASS" in passed.stdout, passed.stdout + passed.stderr
    failed = arena("tasks", "verify", task.id, "--store", store, "--answer", str(wrong), cwd=cwd, env=env)
    assert failed.returncode == 1 and "FAIL" in failed.stdout, failed.stdout + failed.stderr
    synth = arena("synth", "env=vetclinic", "n=4", "difficulty=[1,2]", f"store.url={store}", cwd=cwd, env=env)
    assert synth.returncode == 0, synth.stdout[-2000:] + synth.stderr[-2000:]
    assert arena("demo", "--env", "vetclinic", cwd=cwd, env=env).returncode == 0
    stored = (f"store.url={store}", "suite=stored", "suite.envs=[vetclinic]", "tasks_per_env=3")
    evaluated = arena("eval", "policy=reference", *stored, cwd=cwd, env=env)
    assert evaluated.returncode == 0, evaluated.stdout[-2000:] + evaluated.stderr[-2000:]
    line = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert line["episodes"] == 3 and line["success"] == 1.0 and line["infra_errors"] == 0
    small = ("rounds=1", "train_set.tasks_per_env=3", "heldout.tasks_per_env=2", "targeted.tasks=2")
    tiny = (
        "trainer.steps_per_round=1",
        "trainer.tasks_per_step=2",
        "trainer.n_rollouts=2",
        "trainer.epochs=1",
    )
    evolved = arena(
        "evolve",
        "envs=[vetclinic]",
        *small,
        *tiny,
        "policy.max_new_tokens=16",
        "rollout.max_turns=2",
        f"store.url={store}",
        cwd=cwd,
        env=env,
        timeout=600,
    )
    assert evolved.returncode == 0, evolved.stdout[-2000:] + evolved.stderr[-2000:]
    assert json.loads(evolved.stdout.strip().splitlines()[-1])["rounds"] == 1


def test_single_file_environment_by_path_and_by_env_var(workspace: tuple[Path, Path, dict[str, str]]) -> None:
    """The README's single-file example passes `env check` (tests optional) and loads by ARENA_ENV_PATH."""
    envs, cwd, env = workspace
    readme = (ROOT / "README.md").read_text()
    source = readme.split("```python\n", 1)[1].split("```", 1)[0]
    (envs / "shelf.py").write_text(source)
    checked = arena("env", "check", str(envs / "shelf.py"), cwd=cwd, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "test_shelf.py" in checked.stdout
    shown = arena(
        "env", "show", "shelf", "--json", cwd=cwd, env=env | {"ARENA_ENV_PATH": str(envs / "shelf.py")}
    )
    assert shown.returncode == 0 and json.loads(shown.stdout)["name"] == "shelf", shown.stderr
