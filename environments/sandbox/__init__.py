"""An OS sandbox for untrusted code (generated programs, third-party tool code): bubblewrap, one
short-lived process per run.

See ``environments/sandbox/runner.py`` and ``docs/security.md``.
"""

from environments.sandbox.functions import FunctionResult, Running, run_function
from environments.sandbox.runner import ProgramRun, Sandbox, SandboxLimits, SandboxUnavailable

__all__ = [
    "FunctionResult",
    "ProgramRun",
    "Running",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailable",
    "run_function",
]
