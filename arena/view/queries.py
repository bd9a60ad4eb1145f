"""The viewer's read-only queries: runs with their success, a run's breakdowns and a page of its episodes,
one episode with its turns and task, an evolve run's rounds, and the tasks that flipped between two runs.

Everything is aggregated and paged in SQL, so a run of tens of thousands of episodes costs a few indexed
queries, never loading its episodes into Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, case, func, select
from sqlalchemy.orm import Session, aliased

from arena.eval.stats import wilson_interval
from arena.store.schema import EpisodeRow, RunRow, StepRow, TaskRow

PAGE_SIZE = 50
RUNS_SHOWN = 500
BREAKDOWNS = {"env": "environment", "level": "level", "category": "category", "failure_mode": "failure mode"}


class NotFound(LookupError):
    """The run or episode a page asks for is not in the store."""


@dataclass(frozen=True)
class Rate:
    """Passed of scored episodes with its 95% Wilson interval; ``infra`` counts the unscored ones."""

    episodes: int
    scored: int
    passed: int

    @property
    def infra(self) -> int:
        return self.episodes - self.scored

    @property
    def success(self) -> float:
        return self.passed / self.scored if self.scored else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.passed, self.scored)


@dataclass(frozen=True)
class RunLine:
    """One row of the runs page."""

    id: str
    kind: str
    policy: str
    suite: str
    status: str
    started: datetime
    revision: str | None
    envs: list[str]
    rate: Rate
    evolve: str | None  # the evolve run an eval round belongs to


@dataclass(frozen=True)
class RunFilters:
    kind: str = ""
    policy: str = ""
    text: str = ""


@dataclass(frozen=True)
class EpisodeFilters:
    env: str = ""
    level: int | None = None
    category: str = ""
    failure_mode: str = ""
    passed: str = ""  # "yes" | "no" | "unscored" | ""
    task: str = ""

    def query(self) -> dict[str, str]:
        """The filters as query-string parameters (only those set)."""
        values = {
            "env": self.env,
            "level": "" if self.level is None else str(self.level),
            "category": self.category,
            "failure_mode": self.failure_mode,
            "passed": self.passed,
            "task": self.task,
        }
        return {k: v for k, v in values.items() if v}


@dataclass(frozen=True)
class EpisodeLine:
    """One row of a run's episode table."""

    task_id: str
    repeat: int
    env: str
    category: str
    level: int
    failure_mode: str
    passed: bool | None
    turns: int
    tokens: int
    wall_s: float


@dataclass
class EpisodePage:
    lines: list[EpisodeLine]
    total: int
    page: int
    pages: int


@dataclass
class EpisodeDetail:
    """One episode with its turns (as recorded) and its task's row, if the store has it."""

    run: RunRow
    row: EpisodeRow
    turns: list[dict[str, Any]]
    task: TaskRow | None


@dataclass
class Flip:
    task_id: str
    repeat: int
    env: str
    level: int
    before: bool
    after: bool


@dataclass
class Round:
    """One evolve round: its held-out eval and what targeted synthesis asked for before it."""

    index: int
    eval: dict[str, Any]
    targeted: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)


def _rate_columns() -> tuple[Any, Any, Any]:
    return (
        func.count(),
        func.count(EpisodeRow.passed),
        func.coalesce(func.sum(case((EpisodeRow.passed.is_(True), 1), else_=0)), 0),
    )


def list_runs(session: Session, filters: RunFilters, limit: int = RUNS_SHOWN) -> list[RunLine]:
    """Runs newest first, with success over their scored episodes and the environments they played."""
    query = select(RunRow).order_by(RunRow.created_at.desc(), RunRow.id.desc()).limit(limit)
    if filters.kind:
        query = query.where(RunRow.kind == filters.kind)
    if filters.policy:
        query = query.where(RunRow.policy.contains(filters.policy, autoescape=True))
    if filters.text:
        needle = filters.text
        query = query.where(
            RunRow.id.contains(needle, autoescape=True) | RunRow.suite.contains(needle, autoescape=True)
        )
    runs = list(session.scalars(query))
    ids = [run.id for run in runs]
    rates = {
        run_id: Rate(int(n), int(scored), int(passed))
        for run_id, n, scored, passed in session.execute(
            select(EpisodeRow.run_id, *_rate_columns())
            .where(EpisodeRow.run_id.in_(ids))
            .group_by(EpisodeRow.run_id)
        )
    }
    envs: dict[str, list[str]] = {}
    for run_id, env in session.execute(
        select(EpisodeRow.run_id, EpisodeRow.env)
        .where(EpisodeRow.run_id.in_(ids))
        .group_by(EpisodeRow.run_id, EpisodeRow.env)
        .order_by(EpisodeRow.env)
    ):
        envs.setdefault(run_id, []).append(env)
    return [
        RunLine(
            run.id,
            run.kind,
            run.policy,
            run.suite,
            run.status,
            run.created_at,
            run.git_revision,
            envs.get(run.id, []),
            rates.get(run.id, Rate(0, 0, 0)),
            (run.config or {}).get("evolve") if run.kind == "eval" else None,
        )
        for run in runs
    ]


def run_kinds_and_policies(session: Session) -> tuple[list[str], list[str]]:
    """The kinds and policies present (the runs page's filter choices)."""
    kinds = list(session.scalars(select(RunRow.kind).distinct().order_by(RunRow.kind)))
    policies = list(session.scalars(select(RunRow.policy).distinct().order_by(RunRow.policy)))
    return kinds, policies


def get_run(session: Session, run_id: str) -> RunRow:
    run = session.get(RunRow, run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r} in the store")
    return run


@dataclass
class RunSummary:
    """A run's success overall and by environment, level, category and failure mode."""

    rate: Rate
    breakdowns: dict[str, list[tuple[str, Rate]]]


def _add(a: Rate, b: Rate) -> Rate:
    return Rate(a.episodes + b.episodes, a.scored + b.scored, a.passed + b.passed)


def run_summary(session: Session, run_id: str) -> RunSummary:
    """Success overall and by each of ``BREAKDOWNS``, from one grouped scan of the run's episodes."""
    columns = [getattr(EpisodeRow, name) for name in BREAKDOWNS]
    groups = session.execute(
        select(*columns, *_rate_columns()).where(EpisodeRow.run_id == run_id).group_by(*columns)
    ).all()
    total = Rate(0, 0, 0)
    folded: dict[str, dict[Any, Rate]] = {name: {} for name in BREAKDOWNS}
    for *values, n, scored, passed in groups:
        rate = Rate(int(n), int(scored), int(passed))
        total = _add(total, rate)
        for name, value in zip(BREAKDOWNS, values, strict=True):
            folded[name][value] = _add(folded[name].get(value, Rate(0, 0, 0)), rate)
    breakdowns = {
        name: [(str(value), rate) for value, rate in sorted(by_value.items())]
        for name, by_value in folded.items()
    }
    return RunSummary(total, breakdowns)


def _filtered(query: Select[Any], run_id: str, filters: EpisodeFilters) -> Select[Any]:
    query = query.where(EpisodeRow.run_id == run_id)
    if filters.env:
        query = query.where(EpisodeRow.env == filters.env)
    if filters.level is not None:
        query = query.where(EpisodeRow.level == filters.level)
    if filters.category:
        query = query.where(EpisodeRow.category == filters.category)
    if filters.failure_mode:
        query = query.where(EpisodeRow.failure_mode == filters.failure_mode)
    if filters.passed == "yes":
        query = query.where(EpisodeRow.passed.is_(True))
    elif filters.passed == "no":
        query = query.where(EpisodeRow.passed.is_(False))
    elif filters.passed == "unscored":
        query = query.where(EpisodeRow.passed.is_(None))
    if filters.task:
        query = query.where(EpisodeRow.task_id.contains(filters.task, autoescape=True))
    return query


def episode_page(
    session: Session,
    run_id: str,
    filters: EpisodeFilters,
    page: int,
    episodes: int | None = None,
    size: int = PAGE_SIZE,
) -> EpisodePage:
    """One page of the run's episodes matching ``filters``, in (task, repeat) order (``episodes``: the
    run's count when the caller knows it, saving a count when nothing is filtered)."""
    if episodes is not None and not filters.query():
        total = episodes
    else:
        total = session.scalar(_filtered(select(func.count()).select_from(EpisodeRow), run_id, filters)) or 0
    pages = max(1, -(-total // size))
    page = min(max(1, page), pages)
    columns = (
        EpisodeRow.task_id,
        EpisodeRow.repeat,
        EpisodeRow.env,
        EpisodeRow.category,
        EpisodeRow.level,
        EpisodeRow.failure_mode,
        EpisodeRow.passed,
        EpisodeRow.metrics,
        EpisodeRow.wall_s,
    )
    query = (
        _filtered(select(*columns), run_id, filters)
        .order_by(EpisodeRow.task_id, EpisodeRow.repeat)
        .limit(size)
        .offset((page - 1) * size)
    )
    lines = [
        EpisodeLine(
            task,
            repeat,
            env,
            category,
            level,
            mode,
            passed,
            int((metrics or {}).get("turns", 0)),
            int((metrics or {}).get("prompt_tokens", 0)) + int((metrics or {}).get("completion_tokens", 0)),
            wall_s,
        )
        for task, repeat, env, category, level, mode, passed, metrics, wall_s in session.execute(query)
    ]
    return EpisodePage(lines, total, page, pages)


def episode(session: Session, run_id: str, task_id: str, repeat: int) -> EpisodeDetail:
    run = get_run(session, run_id)
    row = session.scalar(
        select(EpisodeRow).where(
            EpisodeRow.run_id == run_id, EpisodeRow.task_id == task_id, EpisodeRow.repeat == repeat
        )
    )
    if row is None:
        raise NotFound(f"no episode of task {task_id!r} (repeat {repeat}) in run {run_id!r}")
    turns = list(
        session.scalars(select(StepRow.record).where(StepRow.episode_id == row.id).order_by(StepRow.index))
    )
    return EpisodeDetail(run, row, turns, session.get(TaskRow, task_id))


def flips(session: Session, before: str, after: str) -> list[Flip]:
    """Episodes of the same (task, repeat) scored in both runs whose outcome differs."""
    a, b = aliased(EpisodeRow), aliased(EpisodeRow)
    query = (
        select(a.task_id, a.repeat, a.env, a.level, a.passed, b.passed)
        .join(b, and_(a.task_id == b.task_id, a.repeat == b.repeat))
        .where(a.run_id == before, b.run_id == after, a.passed.is_not(None), b.passed.is_not(None))
        .where(a.passed != b.passed)
        .order_by(b.passed.desc(), a.env, a.level, a.task_id, a.repeat)
    )
    return [Flip(*row) for row in session.execute(query)]


def evolve_rounds(run: RunRow) -> list[Round]:
    """The rounds an evolve run's stages record, in order (a running run shows those finished)."""
    stages: dict[str, Any] = (run.summary or {}).get("stages", {})
    indices = sorted(int(key[5:]) for key in stages if key.startswith("eval:") and key[5:].isdigit())
    rounds = []
    for index in indices:
        training = stages.get(f"train:{index}") or (stages.get("warm_start:0", {}) if index == 0 else {})
        rounds.append(Round(index, stages[f"eval:{index}"], stages.get(f"targeted:{index}", {}), training))
    return rounds
