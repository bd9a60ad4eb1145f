"""An OS sandbox for untrusted code (generated programs, third-party tool code): bubblewrap, one
short-lived process per run, or one persistent process per session (``worker.py``).

See ``environments/sandbox/runner.py`` and ``docs/security.md``.
"""

from environments.sandbox.functions import FunctionResult, Running, run_function
from environments.sandbox.runner import ProgramRun, Sandbox, SandboxLimits, SandboxUnavailable
from environments.sandbox.worker import WarmWorkers, Worker, WorkerError, WorkerFailed

__all__ = [
    "FunctionResult",
    "ProgramRun",
    "Running",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailable",
    "WarmWorkers",
    "Worker",
    "WorkerError",
    "WorkerFailed",
    "run_function",
]
