"""How synthesis runs tools: through a session lease's control plane, in an isolated session.

The tools (trusted or not) execute inside the environment server (a local
process or a container). Runtime failures raise ``InfrastructureError`` and are never taken for a
task that "returned nothing".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from task_synth.sessions import SessionLease
from task_synth.values import canonical


@dataclass(frozen=True)
class StepOutcome:
    """A tool's JSON result (``ok``) or its error payload ``{code, message}``."""

    ok: bool
    value: Any
    remembered: bool = False  # answered from the seed memo (already seen once)

    @property
    def empty(self) -> bool:
        return self.value is None or self.value == [] or self.value == {}


@dataclass(frozen=True)
class ProgramOutcome:
    """A generated program's run in the environment server: its result or error, and the calls it made."""

    ok: bool
    value: Any
    error: str | None
    calls: list[tuple[str, dict[str, Any]]]


class ToolRunner(Protocol):
    """One isolated session that synthesis can call tools in, reset and inspect."""

    async def call(self, tool: str, arguments: dict[str, Any]) -> StepOutcome: ...

    async def run_program(self, source: str) -> ProgramOutcome: ...

    async def reset(self, *, force: bool = False) -> None: ...

    async def diff(self) -> dict[str, Any]: ...


SeedMemo = dict[tuple[str, str], StepOutcome]


class LeaseRunner:
    """A ``ToolRunner`` over a pool lease (control-plane calls; the agent's MCP session is not used).

    With a ``memo`` (shared by runners of the same environment version), a call made while the session is
    still at the seed state is answered from an earlier identical call, when that call left the state
    unchanged (a read, or a write that failed and was rolled back). Synthesis uses that
    only while *exploring*: every kept task's reference is then executed for real in a fresh session,
    which also catches any tool whose output is not a function of state and arguments.
    """

    def __init__(
        self, lease: SessionLease, mutating: frozenset[str] | None = None, *, memo: SeedMemo | None = None
    ) -> None:
        """``mutating`` names the tools that can write; unknown (``None``), any call may have written."""
        self.lease = lease
        self.mutating = mutating
        self.memo = memo
        self.dirty = False

    async def call(self, tool: str, arguments: dict[str, Any]) -> StepOutcome:
        """Run one tool. Only a successful call to a tool in ``mutating`` makes the next ``reset``
        necessary: a read-only tool cannot write (the server enforces it) and a failed call is rolled
        back whole. At the seed state, reads and failed writes are answered from the memo if one is set."""
        key = None
        if self.memo is not None and self.mutating is not None and not self.dirty:
            key = (tool, canonical(arguments))
            if (known := self.memo.get(key)) is not None:
                return StepOutcome(known.ok, known.value, remembered=True)
        result = await self.lease.call_as_arena(tool, arguments)
        outcome = StepOutcome(bool(result["ok"]), result["value"])
        wrote = outcome.ok and (self.mutating is None or tool in self.mutating)
        self.dirty |= wrote
        if key is not None and self.memo is not None and not wrote:
            self.memo[key] = outcome
        return outcome

    async def run_program(self, source: str) -> ProgramOutcome:
        """Run generated code in the environment server against this session."""
        run = await self.lease.run_program(source)
        calls = [(str(c["tool"]), dict(c["arguments"])) for c in run["calls"]]
        self.dirty |= any(self.mutating is None or tool in self.mutating for tool, _ in calls)
        return ProgramOutcome(bool(run["ok"]), run["value"], run["error"], calls)

    async def reset(self, *, force: bool = False) -> None:
        """Back to the seed state if a write succeeded since the last reset (or always, with ``force``)."""
        if self.dirty or force:
            await self.lease.reset()
            self.dirty = False

    async def diff(self) -> dict[str, Any]:
        """The session's changes since the seed; none, without asking, while no write has succeeded."""
        return await self.lease.diff() if self.dirty else {}

    async def info(self) -> dict[str, Any]:
        return await self.lease.worker.control.info()

    async def sample(self, rows: int) -> dict[str, list[dict[str, Any]]]:
        return await self.lease.worker.control.sample(rows)
