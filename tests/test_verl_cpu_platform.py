"""The arena's CPU platform for verl answers the calls verl makes on its device (verl training on it end
to end: ``tests/test_verl_train_cpu.py``)."""

from __future__ import annotations

import json

import pytest

from tests.verl_samples import run_isolated

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
    done = run_isolated(["-c", PLATFORM_PROBE], timeout_s=300, env={"VERL_PLATFORM": "cpu"})
    assert done.returncode == 0, done.stdout[-4000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["device"] == "cpu" and probe["backend"] == "gloo" and probe["device_id"] == "cpu"
    assert probe["resource"] == "verl_cpu" and probe["options"] == {"resources": {"verl_cpu": 0.5}}
    assert probe["engine"] == "FSDPEngineWithLMHead"
    free, total = probe["free_total"]
    assert probe["reserved"] == 0 and 0 < free <= total
    assert probe["rng"] is True
