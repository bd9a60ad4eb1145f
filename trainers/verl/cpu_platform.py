"""A CPU platform for verl: its trainer's workers run on CPU processes with gloo, no accelerator.

verl resolves its device through a platform (``verl.plugin.platform``): the device name, the
``torch.<device>`` module its code calls, the collective backend and the Ray resource its workers
request. It ships CUDA, NPU and ROCm platforms; this module adds ``cpu``, selected by
``VERL_PLATFORM=cpu`` (in the driver and, through the job's runtime env, in every Ray worker).
``install()``, called by the job's ``worker_process_setup_hook`` (``trainers.verl.setup.register``),
prepares the processes of verl's worker groups: the FSDP engine registered for ``cpu``, unpinned
offloading, a gloo process group. Nothing in verl's files is changed (one name of its FSDP engine
module is rebound in those processes: ``unpin_offload``); every piece below answers one call site of
verl 0.9.1, named as ``file:line`` under ``site-packages/verl``.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

NAME = "cpu"
ENV = "VERL_PLATFORM"
RESOURCE = "verl_cpu"
"""The Ray resource a CPU trainer rank takes (verl's 'GPU'): a node advertises one unit per rank it may
host (``ray start --resources='{"verl_cpu": N}'``; ``ray.init(resources=...)`` on a local Ray)."""


class CPUDevice(ModuleType):
    """``torch.cpu`` plus the ``torch.cuda`` calls verl makes on its device module
    (``get_torch_device()``, utils/device.py:105) that ``torch.cpu`` lacks. Memory figures are 0:
    the CPU allocator keeps no such counters."""

    def __init__(self) -> None:
        super().__init__("verl_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def current_device() -> torch.device:
        # fsdp_utils.py:507 and transformer_impl.py:1052 move tensors to ``get_device_id()``.
        return torch.device("cpu")

    @staticmethod
    def set_device(_: Any) -> None:
        """distributed.py:74 selects the local rank's device: a CPU process has one."""

    @staticmethod
    def empty_cache() -> None:
        """memory_utils.py:54 and engine_workers.py:769 release cached device memory: none here."""

    @staticmethod
    def ipc_collect() -> None:
        """No CUDA IPC handles to collect on a CPU."""

    @staticmethod
    def memory_reserved(_: Any = None) -> int:
        return 0  # memory_utils.py:47

    @staticmethod
    def memory_allocated(_: Any = None) -> int:
        return 0  # memory_utils.py:97

    @staticmethod
    def max_memory_reserved(_: Any = None) -> int:
        return 0  # memory_utils.py:100

    @staticmethod
    def max_memory_allocated(_: Any = None) -> int:
        return 0  # memory_utils.py:99

    @staticmethod
    def get_device_properties(_: Any = None) -> Any:
        """memory_utils.py:95 reads ``total_memory``: the machine's."""
        import psutil

        return SimpleNamespace(name=CPUDevice.get_device_name(), total_memory=psutil.virtual_memory().total)

    @staticmethod
    def mem_get_info(_: Any = None) -> tuple[int, int]:
        """(free, total) bytes of the machine's memory, for verl's memory logs."""
        import psutil

        memory = psutil.virtual_memory()
        return memory.available, memory.total

    @staticmethod
    def set_per_process_memory_fraction(*_: Any) -> None:
        """No per-process memory cap on a CPU."""

    @staticmethod
    def get_device_name(_: Any = None) -> str:
        return platform.processor() or "CPU"  # flops_counter.py:80

    @staticmethod
    def get_rng_state(_: Any = None) -> torch.Tensor:
        return torch.get_rng_state()  # the CPU generator is the device's

    @staticmethod
    def set_rng_state(state: torch.Tensor, _: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed


DEVICE = CPUDevice()


@PlatformRegistry.register(platform=NAME)
class PlatformCPU(PlatformBase):
    """verl's platform for CPU processes: device ``cpu``, gloo collectives, ranks placed on ``verl_cpu``."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected (platform_manager.py:100-111): only VERL_PLATFORM=cpu selects it.
        return os.environ.get(ENV, "").strip().lower() == NAME

    def current_device(self) -> torch.device:  # type: ignore[override]
        return DEVICE.current_device()

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        DEVICE.set_device(device_index)

    def synchronize(self, device_index: int | None = None) -> None:
        torch.cpu.synchronize()

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """device.py:143 toggles CUDA's expandable segments: nothing to set on a CPU."""

    def empty_cache(self) -> None:
        DEVICE.empty_cache()

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        # platform_manager.py:113-117 falls back to 'nvidia' (NCCL) when no platform is detected.
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # read by verl's Worker; empty on a CPU node

    def ray_resource_name(self) -> str:
        # Not "CPU": verl's placement bundle is {"CPU": max_colocate_count, <this>: 1}
        # (single_controller/ray/base.py:146-148), and the CPU count is what lets a worker group's
        # get_master_addr_port task (base.py:523) run beside the ranks already placed in the bundle.
        # Workers then ask for {"resources": {RESOURCE: share}} (platform_base.py:228-231, base.py:405).
        return RESOURCE

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    @contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        """No device profiler on a CPU."""

    def profiler_stop(self) -> None:
        """No device profiler on a CPU."""

    def cudart(self) -> Any:
        return None


def register_engine() -> None:
    """verl registers its FSDP language-model engine for ``cuda`` and ``npu`` only
    (workers/engine/fsdp/transformer_impl.py:1143): register the same class for ``cpu``."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    engines = EngineRegistry._engines.get("language_model", {})
    if all(NAME not in engines.get(backend, {}) for backend in ("fsdp", "fsdp2")):
        EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=NAME)(
            FSDPEngineWithLMHead
        )


def unpin_offload() -> None:
    """verl's FSDP2 engine gives forward-only models (the ref) ``CPUOffloadPolicy(pin_memory=True)``
    (workers/engine/fsdp/transformer_impl.py:462); pinning host memory needs an accelerator ("Cannot access
    accelerator device when none is available"). The engine module's ``CPUOffloadPolicy`` name is rebound
    to a subclass that never pins (in this process only; on a CPU the offloaded copy is where the model
    lives anyway)."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    class UnpinnedCPUOffloadPolicy(CPUOffloadPolicy):
        def __init__(self, pin_memory: bool = False) -> None:
            super().__init__(pin_memory=False)

    if transformer_impl.CPUOffloadPolicy is CPUOffloadPolicy:  # once
        transformer_impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def init_process_group() -> None:
    """A verl worker's process group as plain ``gloo``, before verl builds its own: verl asks for
    ``cpu:gloo,{device}:{backend}`` (utils/distributed.py:89, from engine_workers.py:89), which torch
    refuses when both halves are ``cpu``; verl skips its own when one exists. Reads the rank, world size
    and rendezvous address verl's ``RayWorkerGroup`` puts in the worker's environment
    (single_controller/ray/base.py:632-640)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(
            backend="gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"])
        )


def count_platform_resource() -> None:
    """verl checks a worker group's placement against the cluster before it asks Ray for it, counting
    only ``GPU`` (else ``NPU``) node resources (``ResourcePoolManager._check_resource_available``,
    single_controller/ray/base.py:226-243), never the platform's own: rebound, in this process, to count
    ``verl_cpu``, with an error that says how to advertise it."""
    import ray
    from verl.single_controller.ray.base import ResourcePoolManager

    def check_cpu_ranks_available(manager: ResourcePoolManager) -> None:
        nodes = ray._private.state.available_resources_per_node().values()
        available = sum(node.get(RESOURCE, 0) for node in nodes)
        required = manager.get_n_gpus()
        if available < required:
            raise ValueError(
                f"verl on CPU wants {required} trainer ranks but the Ray cluster offers {available:g} "
                f"{RESOURCE} (start nodes with ray start --resources='{{\"{RESOURCE}\": N}}')"
            )

    ResourcePoolManager._check_resource_available = check_cpu_ranks_available


def selected() -> bool:
    """Whether this process runs verl on the CPU platform (``VERL_PLATFORM=cpu``)."""
    return os.environ.get(ENV, "").strip().lower() == NAME


def install() -> None:
    """With ``VERL_PLATFORM=cpu``: placement checked against ``verl_cpu`` in every process (the trainer's
    driver creates the resource pools); in a process of a verl worker group (``WG_BACKEND=ray``, ``RANK``
    set by ``RayWorkerGroup``) also the FSDP engine registered for ``cpu`` and the gloo process group.
    The platform class itself registers on import, in every process."""
    if not selected():
        return
    count_platform_resource()
    if os.environ.get("WG_BACKEND") == "ray" and "RANK" in os.environ:
        register_engine()
        unpin_offload()
        init_process_group()
