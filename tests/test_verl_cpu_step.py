"""verl trains on CPU: one real GRPO step (``tests/verl_cpu_step.py``) through verl's own workers on the
arena's CPU platform, and the platform's answers to the calls verl makes on its device."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
STEP_TIMEOUT_S = 2400  # a hang guard: 1,486 s measured on 2 cores under load 16-38, far less idle


def run_isolated(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``python args`` in its own process group, killed with everything it started (its Ray) on timeout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VERL_PLATFORM": "cpu"}
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
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


PLATFORM_PROBE = """
import json, torch, trainers.verl.setup
from trainers.verl import cpu_platform
trainers.verl.setup.register()
cpu_platform.register_engine()  # install() does it in verl's worker processes only
from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device, get_device_id
from verl.utils.device import get_resource_name
from verl.plugin.platform import get_platform
from verl.workers.engine.base import EngineRegistry
from verl.utils.flops_counter import get_device_flops
device = get_torch_device()
print(json.dumps({
    "device": get_device_name(), "backend": get_nccl_backend(), "device_id": str(get_device_id()),
    "resource": get_resource_name(), "options": get_platform().ray_resource_options(0.5),
    "engine": EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__,
    "reserved": device.memory_reserved(), "free_total": list(device.mem_get_info()),
    "flops": get_device_flops(), "rng": device.get_rng_state().equal(torch.get_rng_state()),
}))
"""


@pytest.mark.slow
def test_cpu_platform_answers_verls_device_calls() -> None:
    """With VERL_PLATFORM=cpu, verl's device helpers resolve to the CPU platform: gloo, the CPU device,
    the FSDP engine registered for it, its own Ray resource, the memory calls torch.cpu lacks."""
    done = run_isolated(["-c", PLATFORM_PROBE], timeout_s=300)
    assert done.returncode == 0, done.stdout[-4000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["device"] == "cpu" and probe["backend"] == "gloo" and probe["device_id"] == "cpu"
    assert probe["resource"] == "verl_cpu" and probe["options"] == {"resources": {"verl_cpu": 0.5}}
    assert probe["engine"] == "FSDPEngineWithLMHead"
    free, total = probe["free_total"]
    assert probe["reserved"] == 0 and 0 < free <= total
    assert probe["rng"] is True


@pytest.mark.slow
def test_one_grpo_step_on_cpu(tmp_path: Path) -> None:
    """Rewards from the verifier through the arena_agent loop, arena_grpo advantages through verl's
    registry, verl's FSDP2 actor and ref workers on gloo, the update changes every parameter tensor
    and the policy's log-probs, and the checkpoint's Hugging Face export holds the new weights. The hf
    rollout replica generates with the actor's log-probs, and after verl's weight sync with the
    updated actor's."""
    result = tmp_path / "result.json"
    done = run_isolated(["-m", "tests.verl_cpu_step", str(result), str(tmp_path)], timeout_s=STEP_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-6000:]
    step = json.loads(result.read_text())
    assert step["adv_estimator"] == "arena_grpo"
    assert sorted(step["rewards"]) == [0.0, 1.0]  # the verifier's verdicts: one right count, one wrong
    assert sorted(step["failure_modes"]) == ["solved", "wrong_answer"]
    solved = step["rewards"].index(1.0)
    assert step["advantages"][solved] > 0 > step["advantages"][1 - solved]  # GRPO: above / below the mean
    assert step["advantages"][solved] == pytest.approx(-step["advantages"][1 - solved], rel=1e-4)
    metrics = {key.rsplit("/", 1)[-1]: value for key, value in step["metrics"].items()}
    for name in ("pg_loss", "kl_loss", "grad_norm"):
        assert name in metrics and metrics[name] == metrics[name], name  # reported and not NaN
    assert metrics["grad_norm"] > 0
    assert step["ref_equals_old"]  # before the update the ref and the actor are the same model
    assert step["log_prob_delta"] > 1e-4  # the updated policy scores the same tokens differently
    assert step["tensors_exported"] == step["tensors"] > 0  # the HF export holds every tensor of the model
    assert step["tensors_changed"] == step["tensors"]  # and every one of them moved
    before, after = step["replica_before_update"], step["replica_after_sync"]
    assert before["tokens"] > 0 and after["tokens"] > 0  # the tiny model generated
    # the replica's log-probs are the policy's (bf16 on both sides: 0.011 mean difference measured)
    assert before["vs_actor"] == pytest.approx(before["vs_ref"]) and before["vs_actor"] < 0.05
    # after the sync they follow the updated actor, not the weights it started from (0.011 vs 0.044)
    assert after["vs_actor"] < 0.5 * after["vs_ref"]
    assert after["global_steps"] == [1, 1]  # every turn served by the step-1 weights
