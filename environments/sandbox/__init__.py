"""An OS sandbox for untrusted code (generated programs): bubblewrap, one short-lived process per run.

See ``environments/sandbox/runner.py`` and ``docs/security.md``.
"""

from environments.sandbox.runner import ProgramRun, Sandbox, SandboxLimits, SandboxUnavailable

__all__ = ["ProgramRun", "Sandbox", "SandboxLimits", "SandboxUnavailable"]
