"""Readable renderings of a ``Task`` for ``arena tasks show``."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from task_synth.model import AggregateStep, CallStep, CodeStep, Ref, Step, Task


def _ref(ref: Ref) -> str:
    return f"⟨step {ref.step + 1}{'.' + ref.path if ref.path else ''}⟩"


def _args(arguments: dict[str, Any], bound: dict[str, str]) -> str:
    parts = [f"{k}={_compact(v)}" for k, v in arguments.items()]
    parts += [f"{k}={v}" for k, v in bound.items()]
    return ", ".join(parts)


def step_line(step: Step) -> str:
    """One line per step: ``tool(args)``, ``for each …``, or ``count(…) of …``."""
    if isinstance(step, CallStep):
        return f"{step.tool}({_args(step.arguments, {k: _ref(r) for k, r in step.bindings.items()})})"
    if isinstance(step, CodeStep):
        return f"program of {len(step.source.strip().splitlines())} lines, run in the environment server:"
    if isinstance(step, AggregateStep):
        where = " and ".join(f"{c.field} {c.op} {_compact(c.value)}" for c in step.where)
        key = f" → {step.key_field}" if step.key_field else ""
        return (
            f"{step.function}({step.field or ''}) of {_ref(step.source)}"
            + (f" where {where}" if where else "")
            + key
        )
    bound = {k: f"item.{v}" for k, v in step.item_bindings.items()}
    return f"for each item of {_ref(step.source)}: {step.tool}({_args(step.arguments, bound)})"


def _json(value: Any) -> Syntax:
    return Syntax(json.dumps(value, indent=2, ensure_ascii=False, default=str), "json", word_wrap=True)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _knobs(task: Task) -> RenderableType:
    table = Table(show_header=False, box=None)
    table.add_row("difficulty", str(task.difficulty))
    for name, value in (task.knobs.model_dump() if task.knobs else {}).items():
        table.add_row(name, str(value))
    for name, value in task.measured.items():
        table.add_row(f"measured {name}", f"{value:g}")
    return table


def _solution(task: Task) -> RenderableType:
    if task.solution is None:
        return Text("(none)")
    lines = [f"{i}. {step_line(step)}" for i, step in enumerate(task.solution.steps, start=1)]
    lines += [f"answer.{key} = {_ref(ref)}" for key, ref in task.solution.answer.items()]
    programs = [
        Syntax(step.source.strip(), "python", word_wrap=True)
        for step in task.solution.steps
        if isinstance(step, CodeStep)
    ]
    return Group(Text("\n".join(lines)), *programs)


def _verifier(task: Task) -> RenderableType:
    parts: list[RenderableType] = [Text(f"matcher: {task.verifier.matcher}")]
    if task.verifier.rubric is not None:
        rubric = Table(title="answer rubric", title_justify="left")
        for column in ("field", "type", "expected", "tolerance"):
            rubric.add_column(column)
        for name, rule in task.verifier.rubric.fields.items():
            rubric.add_row(name, rule.type, _compact(rule.value), f"{rule.tolerance:g}")
        parts.append(rubric)
    if task.verifier.state is not None:
        parts.append(Text("final state must change exactly these rows:"))
        for table, changes in task.verifier.state.expected.items():
            for kind, rows in changes.items():
                parts += [Text(f"  {table} {kind}: {_compact(row)}") for row in rows]
        if task.verifier.state.ignore_columns:
            parts.append(Text(f"present but not compared: {', '.join(task.verifier.state.ignore_columns)}"))
    if task.verifier.reference_answer is not None:
        parts += [Text("their reference answer:"), _json(task.verifier.reference_answer)]
    return Group(*parts)


def task_view(task: Task) -> RenderableType:
    """The request, difficulty and knobs, reference solution and answer, and the verifier."""
    title = f"{task.id} — {task.env} v{task.env_version} — {task.kind} — level {task.difficulty}"
    return Group(
        Panel(Text(task.request), title=title, title_align="left"),
        Panel(_knobs(task), title="difficulty", title_align="left"),
        Panel(_solution(task), title="reference solution", title_align="left"),
        Panel(
            Text("(none: the final state is checked)")
            if task.reference_answer is None
            else _json(task.reference_answer),
            title="reference answer",
            title_align="left",
        ),
        Panel(_verifier(task), title="verifier", title_align="left"),
    )
