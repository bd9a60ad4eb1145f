"""Verifiers: the answer rubric, the final-state check, and verifying a submission end to end."""

from __future__ import annotations

import contextlib
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from task_synth.model import FieldRule, Rubric, StateCheck, Task, Verdict
from task_synth.sessions import SessionProvider
from task_synth.values import canonical, json_type

ABSOLUTE_TOLERANCE = 1e-6


def rule_for(value: Any, *, tolerance: float = 0.0) -> FieldRule:
    return FieldRule(type=json_type(value), value=value, tolerance=tolerance)


def _type_ok(rule: FieldRule, value: Any) -> bool:
    actual = json_type(value)
    if rule.type == "number":
        return actual in ("number", "integer")
    if rule.type == "integer":
        return actual == "integer" or (actual == "number" and float(value).is_integer())
    return actual == rule.type


def _same(rule: FieldRule, value: Any) -> bool:
    expected = rule.value
    if rule.type in ("number", "integer"):
        margin = max(ABSOLUTE_TOLERANCE, rule.tolerance * abs(expected))
        return math.isfinite(float(value)) and abs(float(value) - float(expected)) <= margin
    if rule.type == "string":
        return value.strip().casefold() == expected.strip().casefold()
    if rule.type == "array":
        return sorted(map(canonical, value)) == sorted(map(canonical, expected))
    return canonical(value) == canonical(expected)


def accepts(rule: FieldRule, value: Any) -> bool:
    """Whether the rule takes ``value`` for the expected one: the right JSON type, numbers within the
    tolerance, strings ignoring case and surrounding space, arrays as multisets."""
    return _type_ok(rule, value) and _same(rule, value)


def field_failures(rubric: Rubric, answer: Mapping[str, Any]) -> dict[str, str | None]:
    """Per rubric field: why the answer's value fails it, or None when it passes."""
    failures: dict[str, str | None] = {}
    for key, rule in rubric.fields.items():
        if key not in answer:
            failures[key] = f"missing field {key!r}"
        elif not _type_ok(rule, answer[key]):
            failures[key] = f"field {key!r} should be {rule.type}, got {json_type(answer[key])}"
        elif not _same(rule, answer[key]):
            failures[key] = f"field {key!r} has a wrong value"
        else:
            failures[key] = None
    return failures


def check_answer(rubric: Rubric, answer: Any) -> list[str]:
    """Reasons the answer fails the rubric (empty when it passes)."""
    if not isinstance(answer, Mapping):
        return [f"the answer must be a JSON object, got {json_type(answer)}"]
    reasons = [reason for reason in field_failures(rubric, answer).values() if reason]
    if not rubric.extra_fields_allowed:
        reasons += [f"unexpected field {key!r}" for key in answer if key not in rubric.fields]
    return reasons


def normalize_diff(diff: Mapping[str, Any], ignore_columns: list[str]) -> dict[str, dict[str, list[Any]]]:
    """A diff (from ``Lease.diff()``) as comparable data: rows without ignored columns, sorted."""
    ignored = set(ignore_columns)

    def clean(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in row.items() if f"{table}.{k}" not in ignored}

    out: dict[str, dict[str, list[Any]]] = {}
    for table, changes in diff.items():
        normal = {
            "inserted": sorted((clean(table, r) for r in changes["inserted"]), key=canonical),
            "deleted": sorted((clean(table, r) for r in changes["deleted"]), key=canonical),
            "changed": sorted(
                (
                    {"key": c["key"], "after": clean(table, c["after"])}
                    for c in changes["changed"]
                    if any(f"{table}.{col}" not in ignored for col in c["columns"])
                ),
                key=canonical,
            ),
        }
        if any(normal.values()):
            out[table] = normal
    return out


def check_state(check: StateCheck, diff: Mapping[str, Any]) -> list[str]:
    """Reasons the episode's changes differ from the expected ones (missing, wrong or extra writes)."""
    actual = normalize_diff(diff, check.ignore_columns)
    reasons = []
    for table in sorted(set(actual) | set(check.expected)):
        want = check.expected.get(table, {"inserted": [], "deleted": [], "changed": []})
        got = actual.get(table, {"inserted": [], "deleted": [], "changed": []})
        for kind in ("inserted", "deleted", "changed"):
            # Multisets: the same row written twice (its differing columns ignored) is one write too many.
            want_rows = Counter(canonical(r) for r in want[kind])
            got_rows = Counter(canonical(r) for r in got[kind])
            if missing := (want_rows - got_rows).total():
                reasons.append(f"{table}: {missing} expected {kind} row(s) missing or different")
            if extra := (got_rows - want_rows).total():
                reasons.append(f"{table}: {extra} unexpected {kind} row(s)")
    return reasons


def _agentworld_reasons(reference: Any, answer: Any, random_paths: Sequence[str] = ()) -> list[str]:
    from environments.importers.agentworld.answers import ClockWindow, match_answer

    now = datetime.now(UTC).replace(tzinfo=None)
    window = ClockWindow.around(now - timedelta(days=1), now + timedelta(minutes=5))
    found = match_answer(reference, answer, window, known_random=frozenset(random_paths))
    return [] if found else ["the answer does not match the reference"]


def verify(task: Task, answer: Any, diff: Mapping[str, Any] | None) -> Verdict:
    """Apply every check of the task's verifier to an answer and (for state tasks) the episode's diff."""
    verifier = task.verifier
    reasons: list[str] = []
    criteria: dict[str, bool] = {}
    if verifier.matcher == "agentworld":
        random_paths = task.provenance.get("not_reproducible") or ()
        failed = _agentworld_reasons(verifier.reference_answer, answer, random_paths)
        criteria["answer"] = not failed
        reasons += failed
    if verifier.rubric is not None:
        fields = field_failures(verifier.rubric, answer) if isinstance(answer, Mapping) else {}
        for key in verifier.rubric.fields:
            criteria[f"field:{key}"] = key in fields and fields[key] is None
        reasons += check_answer(verifier.rubric, answer)
    if verifier.state is not None:
        failed = (
            ["this task checks the final database state, but no episode state was given"]
            if diff is None
            else check_state(verifier.state, diff)
        )
        criteria["state"] = not failed
        reasons += failed
    return Verdict(passed=not reasons, reasons=reasons, criteria=criteria)


def parse_submission(task: Task, submission: Any) -> tuple[Any, list[dict[str, Any]]]:
    """``{"answer": ..., "calls": [{"tool", "arguments"}...]}``; a bare object is the answer of a task
    that checks no state."""
    if isinstance(submission, Mapping) and ("answer" in submission or "calls" in submission):
        calls = submission.get("calls") or []
        if not isinstance(calls, list) or not all(isinstance(c, Mapping) and "tool" in c for c in calls):
            raise ValueError('"calls" must be a list of {"tool": ..., "arguments": {...}} objects')
        answer = submission.get("answer")
        if isinstance(answer, str):
            with contextlib.suppress(ValueError):
                answer = json.loads(answer)
        return answer, [dict(c) for c in calls]
    if task.verifier.state is not None:
        raise ValueError(
            'this task checks the final database state: submit {"calls": [...], "answer": ...} '
            "so the calls can be replayed in a fresh session"
        )
    return submission, []


async def verify_submission(
    pool: SessionProvider | None, task: Task, submission: Any, *, env_ref: str | None = None
) -> Verdict:
    """Verify a submission; its tool calls (state tasks) are replayed in a fresh session of ``pool``
    (of ``env_ref`` if given: the reference the pool knows the task's environment by; else ``task.env``)."""
    from task_synth.runner import LeaseRunner

    answer, calls = parse_submission(task, submission)
    if task.verifier.state is None:
        return verify(task, answer, None)
    if pool is None:
        raise ValueError("verifying a state task needs an environment pool")
    async with pool.session(env_ref or task.env) as lease:
        runner = LeaseRunner(lease)
        for call in calls:
            await runner.call(str(call["tool"]), dict(call.get("arguments") or {}))
        diff = await runner.diff()
    return verify(task, answer, diff)
