"""Tests of the project_tracker environment; `arena env check` runs them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest

from environments.sdk.errors import ErrorCode
from environments.sdk.testing import EnvHarness

from . import TODAY, env

Args = Callable[[EnvHarness], dict[str, Any]]
TODAY_ISO = TODAY.isoformat()
PAST = "2026-06-01"
FUTURE = "2026-07-20"


@pytest.fixture
def h() -> Iterator[EnvHarness]:
    with EnvHarness(env) as harness:
        yield harness


# --- helpers: fixtures are looked up in the seed rather than hard-coded ------------------------------


def fails(h: EnvHarness, code: ErrorCode, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail with ``code``; return the error message."""
    outcome = h.outcome(tool, **arguments)
    assert not outcome.ok, f"{tool} unexpectedly succeeded: {outcome.value}"
    assert outcome.error_code == code, outcome.value
    return outcome.value["message"]


def scalar(h: EnvHarness, sql: str, *params: Any) -> Any:
    rows = h.query(sql, *params)
    assert rows, f"seed has no row for: {sql} {params}"
    return rows[0][0]


def member(h: EnvHarness, project: str, role: str) -> int:
    """The first active member of ``project`` with ``role``."""
    return scalar(
        h,
        "SELECT m.user_id FROM memberships m JOIN projects p ON p.id = m.project_id "
        "JOIN users u ON u.id = m.user_id WHERE p.key = ? AND m.role = ? AND u.active ORDER BY m.id",
        project,
        role,
    )


def inactive_member(h: EnvHarness, project: str) -> int:
    return scalar(
        h,
        "SELECT m.user_id FROM memberships m JOIN projects p ON p.id = m.project_id "
        "JOIN users u ON u.id = m.user_id WHERE p.key = ? AND m.role = 'developer' AND NOT u.active",
        project,
    )


def outsider(h: EnvHarness, project: str) -> int:
    """An active user who is not a member of ``project``."""
    return scalar(
        h,
        "SELECT u.id FROM users u WHERE u.active AND u.id NOT IN (SELECT m.user_id FROM memberships m "
        "JOIN projects p ON p.id = m.project_id WHERE p.key = ?) ORDER BY u.id",
        project,
    )


def issue(h: EnvHarness, condition: str, *params: Any) -> str:
    """The key of the first issue of an active project matching ``condition`` (on issues ``i``)."""
    return scalar(
        h,
        "SELECT i.key FROM issues i JOIN projects p ON p.id = i.project_id "
        f"WHERE p.status = 'active' AND {condition} ORDER BY i.id",
        *params,
    )


def sprint_of(h: EnvHarness, project: str, status: str) -> int:
    return scalar(
        h,
        "SELECT s.id FROM sprints s JOIN projects p ON p.id = s.project_id WHERE p.key = ? AND s.status = ?",
        project,
        status,
    )


def in_progress_count(h: EnvHarness, user_id: int) -> int:
    return scalar(h, "SELECT COUNT(*) FROM issues WHERE assignee_id = ? AND status = 'in_progress'", user_id)


def saturate(h: EnvHarness, user_id: int, project: str = "PAY") -> None:
    """Start open issues of ``project`` for ``user_id`` until the user reaches the in-progress limit."""
    keys = h.query(
        "SELECT i.key FROM issues i JOIN projects p ON p.id = i.project_id "
        "WHERE p.key = ? AND i.status = 'open' AND i.type != 'epic' ORDER BY i.id LIMIT ?",
        project,
        3 - in_progress_count(h, user_id),
    )
    for (key,) in keys:
        h.call("assign_issue", issue_key=key, assignee_id=user_id)
        h.call("transition_issue", issue_key=key, status="in_progress")
    assert in_progress_count(h, user_id) == 3


SPRINT_LOAD = "(SELECT COALESCE(SUM(x.story_points), 0) FROM issues x WHERE x.sprint_id = s.id)"


def tight_sprint_issue(h: EnvHarness) -> str:
    """An issue of an open sprint that cannot grow to 13 points without exceeding the sprint's capacity."""
    return issue(
        h,
        f"i.id IN (SELECT x.id FROM issues x JOIN sprints s ON s.id = x.sprint_id WHERE s.status != 'closed' "
        f"AND {SPRINT_LOAD} - x.story_points + 13 > s.capacity_points)",
    )


def over_capacity_plan(h: EnvHarness) -> dict[str, Any]:
    """An unfinished estimated backlog issue and an open sprint of its project with too little room for it."""
    key, sprint_id = h.query(
        "SELECT i.key, s.id FROM issues i JOIN sprints s ON s.project_id = i.project_id "
        "JOIN projects p ON p.id = i.project_id WHERE p.status = 'active' AND s.status != 'closed' "
        "AND i.sprint_id IS NULL AND i.status != 'done' AND i.story_points IS NOT NULL "
        f"AND {SPRINT_LOAD} + i.story_points > s.capacity_points"
    )[0]
    return {"issue_key": key, "sprint_id": sprint_id}


def into_planned_sprint(h: EnvHarness, key: str) -> dict[str, Any]:
    """Arguments moving ``key`` into the planned sprint of its own project."""
    return {"issue_key": key, "sprint_id": sprint_of(h, key.split("-")[0], "planned")}


# --- seed -------------------------------------------------------------------------------------------


def test_seed_has_enough_related_rows(h: EnvHarness) -> None:
    tables = ["users", "projects", "memberships", "sprints", "issues", "comments"]
    counts = {t: h.query(f"SELECT COUNT(*) FROM {t}")[0][0] for t in tables}
    assert sum(counts.values()) >= 200
    assert sum(1 for n in counts.values() if n > 0) >= 4
    assert counts["issues"] >= 150 and counts["comments"] >= 150
    assert h.query("PRAGMA foreign_key_check") == []


def test_seed_respects_business_rules(h: EnvHarness) -> None:
    over_capacity = h.query(f"SELECT s.id FROM sprints s WHERE {SPRINT_LOAD} > s.capacity_points")
    assert over_capacity == []
    overloaded = h.query(
        "SELECT assignee_id FROM issues WHERE status = 'in_progress' GROUP BY assignee_id HAVING COUNT(*) > 3"
    )
    assert overloaded == []
    done_parent_open_child = h.query(
        "SELECT c.key FROM issues c JOIN issues p ON p.id = c.parent_id "
        "WHERE p.status = 'done' AND c.status != 'done'"
    )
    assert done_parent_open_child == []
    assert h.query("SELECT key FROM issues WHERE status != 'open' AND assignee_id IS NULL") == []
    non_member_assignees = h.query(
        "SELECT i.key FROM issues i LEFT JOIN memberships m ON m.project_id = i.project_id "
        "AND m.user_id = i.assignee_id WHERE i.assignee_id IS NOT NULL "
        "AND (m.role IS NULL OR m.role NOT IN ('maintainer', 'developer'))"
    )
    assert non_member_assignees == []
    assert scalar(h, "SELECT MAX(created_on) FROM issues") < TODAY_ISO


# --- reads ------------------------------------------------------------------------------------------


def test_get_issue_returns_details(h: EnvHarness) -> None:
    epic = issue(h, "i.type = 'epic' AND i.status = 'in_progress'")
    result = h.call("get_issue", issue_key=epic.lower())
    assert result["key"] == epic and result["type"] == "epic"
    assert result["allowed_transitions"] == ["review"]
    children = h.query("SELECT key FROM issues WHERE parent_id = ? ORDER BY id", result["id"])
    assert [s["key"] for s in result["sub_issues"]] == [k for (k,) in children]
    comments = h.query("SELECT body FROM comments WHERE issue_id = ? ORDER BY id", result["id"])
    assert [c["body"] for c in result["comments"]] == [b for (b,) in comments]
    assert all(c["author"] for c in result["comments"])


def test_search_issues_filters(h: EnvHarness) -> None:
    result = h.call("search_issues", project_key="pay", status="open", limit=100)
    expected = scalar(h, "SELECT COUNT(*) FROM issues WHERE project_id = 1 AND status = 'open'")
    assert result["total_matches"] == expected == len(result["issues"])
    assert all(i["key"].startswith("PAY-") and i["status"] == "open" for i in result["issues"])

    overdue = h.call("search_issues", overdue=True, sort_by="due_date", limit=100)["issues"]
    assert len(overdue) == scalar(
        h, "SELECT COUNT(*) FROM issues WHERE due_date < ? AND status != 'done'", TODAY_ISO
    )
    assert [i["due_date"] for i in overdue] == sorted(i["due_date"] for i in overdue)

    backlog = h.call("search_issues", project_key="WEB", unassigned=True, backlog_only=True, limit=100)[
        "issues"
    ]
    assert backlog and all(i["assignee_id"] is None and i["sprint_id"] is None for i in backlog)

    sprint_id = sprint_of(h, "MOB", "active")
    in_sprint = h.call("search_issues", sprint_id=sprint_id, limit=100)
    assert in_sprint["total_matches"] == scalar(
        h, "SELECT COUNT(*) FROM issues WHERE sprint_id = ?", sprint_id
    )

    crashes = h.call("search_issues", issue_type="bug", text="CRASH", limit=100)
    expected = scalar(h, "SELECT COUNT(*) FROM issues WHERE type = 'bug' AND title LIKE '%crash%'")
    assert crashes["total_matches"] == expected > 0
    assert all(i["type"] == "bug" and "crash" in i["title"].lower() for i in crashes["issues"])
    critical = h.call("search_issues", priority="critical", limit=100)["issues"]
    assert critical and all(i["priority"] == "critical" for i in critical)

    assignee = scalar(h, "SELECT assignee_id FROM issues WHERE assignee_id IS NOT NULL")
    mine = h.call("search_issues", assignee_id=assignee, limit=100)["issues"]
    assert len(mine) == scalar(h, "SELECT COUNT(*) FROM issues WHERE assignee_id = ?", assignee)


def test_search_issues_sorting_and_limit(h: EnvHarness) -> None:
    result = h.call("search_issues", limit=10)
    assert result["total_matches"] == scalar(h, "SELECT COUNT(*) FROM issues") and len(result["issues"]) == 10
    rank = {"lowest": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}
    ranks = [rank[i["priority"]] for i in h.call("search_issues", limit=100)["issues"]]
    assert ranks == sorted(ranks, reverse=True)
    by_due = h.call("search_issues", project_key="OPS", sort_by="due_date", limit=100)["issues"]
    dated = [i["due_date"] for i in by_due if i["due_date"]]
    assert dated == sorted(dated) and all(i["due_date"] is None for i in by_due[len(dated) :])
    newest = h.call("search_issues", sort_by="created", limit=1)["issues"][0]["key"]
    assert newest == scalar(h, "SELECT key FROM issues ORDER BY created_on DESC, id LIMIT 1")
    keys = [i["key"] for i in h.call("search_issues", project_key="DATA", sort_by="key", limit=3)["issues"]]
    assert keys == ["DATA-1", "DATA-2", "DATA-3"]


def test_find_users(h: EnvHarness) -> None:
    active = h.call("find_users")
    assert len(active) == scalar(h, "SELECT COUNT(*) FROM users WHERE active")
    assert len(h.call("find_users", include_inactive=True)) == scalar(h, "SELECT COUNT(*) FROM users")
    assert [u["name"] for u in active] == sorted(u["name"] for u in active)
    developers = h.call("find_users", project_key="PAY", role="developer", include_inactive=True)
    expected = scalar(h, "SELECT COUNT(*) FROM memberships WHERE project_id = 1 AND role = 'developer'")
    assert len(developers) == expected and all(u["role"] == "developer" for u in developers)
    name = active[0]["name"]
    found = h.call("find_users", name=name.split()[1].upper())
    assert name in [u["name"] for u in found]
    mob = h.call("find_users", name="@ACME.dev", project_key="MOB")
    members_sql = "SELECT COUNT(*) FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.project_id = 2"
    assert len(mob) == scalar(h, members_sql + " AND u.active") and all(u["role"] for u in mob)


def test_get_project(h: EnvHarness) -> None:
    project = h.call("get_project", project_key="ops")
    assert project["key"] == "OPS" and project["status"] == "active"
    assert len(project["members"]) == scalar(
        h, "SELECT COUNT(*) FROM memberships WHERE project_id = ?", project["id"]
    )
    lead = next(m for m in project["members"] if m["user_id"] == project["lead_id"])
    assert lead["role"] == "maintainer" and lead["name"] == project["lead"]
    total = scalar(h, "SELECT COUNT(*) FROM issues WHERE project_id = ?", project["id"])
    assert sum(project["issues_by_status"].values()) == total
    assert [s["status"] for s in project["sprints"]] == ["closed", "closed", "active", "planned"]
    for sprint in project["sprints"]:
        assert sprint["remaining_capacity"] == sprint["capacity_points"] - sprint["committed_points"] >= 0


def test_get_sprint(h: EnvHarness) -> None:
    sprint_id = sprint_of(h, "PAY", "active")
    sprint = h.call("get_sprint", sprint_id=sprint_id)
    committed = scalar(h, "SELECT COALESCE(SUM(story_points), 0) FROM issues WHERE sprint_id = ?", sprint_id)
    done = scalar(
        h,
        "SELECT COALESCE(SUM(story_points), 0) FROM issues WHERE sprint_id = ? AND status = 'done'",
        sprint_id,
    )
    assert sprint["project_key"] == "PAY" and sprint["status"] == "active"
    assert sprint["committed_points"] == committed and sprint["completed_points"] == done
    assert sprint["remaining_capacity"] == sprint["capacity_points"] - committed
    assert len(sprint["issues"]) == scalar(h, "SELECT COUNT(*) FROM issues WHERE sprint_id = ?", sprint_id)


def test_project_report(h: EnvHarness) -> None:
    report = h.call("project_report", project_key="PAY")
    unfinished = scalar(h, "SELECT COUNT(*) FROM issues WHERE project_id = 1 AND status != 'done'")
    assert report["unfinished_issues"] == unfinished == sum(report["unfinished_by_priority"].values())
    assert sum(report["unfinished_by_type"].values()) == unfinished
    assigned = sum(row["open_issues"] for row in report["workload"])
    assert assigned + report["unassigned_unfinished"] == unfinished
    started = scalar(h, "SELECT COUNT(*) FROM issues WHERE project_id = 1 AND status = 'in_progress'")
    assert sum(row["in_progress"] for row in report["workload"]) == started
    overdue = scalar(
        h, "SELECT COUNT(*) FROM issues WHERE project_id = 1 AND status != 'done' AND due_date < ?", TODAY_ISO
    )
    assert len(report["overdue"]) == overdue
    assert all(row["days_overdue"] > 0 for row in report["overdue"])
    closed = h.query("SELECT id FROM sprints WHERE project_id = 1 AND status = 'closed' ORDER BY start_date")
    assert [v["sprint_id"] for v in report["velocity"]] == [sprint_id for (sprint_id,) in closed]
    assert all(v["completed_points"] == v["committed_points"] > 0 for v in report["velocity"])


# --- writes: success paths and multi-step rules ----------------------------------------------------


def create_args(h: EnvHarness) -> dict[str, Any]:
    return {
        "project_key": "PAY",
        "reporter_id": member(h, "PAY", "reporter"),
        "title": "Payout report shows wrong currency",
        "issue_type": "bug",
    }


def test_create_issue(h: EnvHarness) -> None:
    before = scalar(h, "SELECT COUNT(*) FROM issues WHERE project_id = 1")
    epic = issue(h, "p.key = 'PAY' AND i.type = 'epic' AND i.status != 'done'")
    developer = member(h, "PAY", "developer")
    created = h.call(
        "create_issue",
        **create_args(h),
        priority="high",
        description="  Seen by three merchants.  ",
        assignee_id=developer,
        parent_key=epic,
        story_points=5,
        due_date=FUTURE,
    )
    assert created["key"] == f"PAY-{before + 1}"
    assert created["status"] == "open" and created["created_on"] == TODAY_ISO
    assert created["assignee_id"] == developer and created["parent_key"] == epic
    assert created["description"] == "Seen by three merchants." and created["due_date"] == FUTURE
    assert created["allowed_transitions"] == ["in_progress"]
    assert created["key"] in [s["key"] for s in h.call("get_issue", issue_key=epic)["sub_issues"]]
    assert scalar(h, "SELECT priority FROM issues WHERE key = ?", created["key"]) == "high"
    minimal = h.call(
        "create_issue", **create_args(h) | {"title": "  Write payout runbook ", "issue_type": "task"}
    )
    assert minimal["key"] == f"PAY-{before + 2}" and minimal["title"] == "Write payout runbook"
    assert minimal["priority"] == "medium" and minimal["assignee_id"] is None


def test_update_issue(h: EnvHarness) -> None:
    key = issue(h, "i.sprint_id IS NULL AND i.type = 'story'")
    updated = h.call(
        "update_issue",
        issue_key=key,
        title="Reworded title",
        priority="critical",
        story_points=8,
        due_date=FUTURE,
    )
    assert [updated[f] for f in ("title", "priority", "story_points", "due_date")] == [
        "Reworded title",
        "critical",
        8,
        FUTURE,
    ]
    assert h.query("SELECT title, priority FROM issues WHERE key = ?", key) == [
        ("Reworded title", "critical")
    ]
    described = h.call("update_issue", issue_key=key, description="Narrowed scope.")
    assert described["description"] == "Narrowed scope." and described["title"] == "Reworded title"


def test_failed_write_leaves_no_partial_changes(h: EnvHarness) -> None:
    key = tight_sprint_issue(h)
    before_row = h.query("SELECT title, story_points, priority FROM issues WHERE key = ?", key)
    before_hash = h.state.state_hash()
    # The tool applies the new title and priority first and only then finds the sprint over capacity.
    arguments = {"issue_key": key, "title": "Renamed", "priority": "lowest", "story_points": 13}
    message = fails(h, ErrorCode.LIMIT_EXCEEDED, "update_issue", **arguments)
    assert key in message and "points left" in message
    assert h.query("SELECT title, story_points, priority FROM issues WHERE key = ?", key) == before_row
    assert h.state.state_hash() == before_hash
    assert h.state.diff() == {}


def test_assign_and_unassign_issue(h: EnvHarness) -> None:
    key = issue(h, "p.key = 'PAY' AND i.status = 'open' AND i.assignee_id IS NULL")
    developer = member(h, "PAY", "developer")
    assigned = h.call("assign_issue", issue_key=key, assignee_id=developer)
    assert assigned["assignee_id"] == developer and assigned["assignee"]
    assert scalar(h, "SELECT assignee_id FROM issues WHERE key = ?", key) == developer
    assert h.call("assign_issue", issue_key=key, assignee_id=None)["assignee_id"] is None
    assert scalar(h, "SELECT assignee_id FROM issues WHERE key = ?", key) is None
    started = issue(h, "p.key = 'PAY' AND i.status = 'in_progress' AND i.type != 'epic'")
    idle = scalar(
        h,
        "SELECT m.user_id FROM memberships m JOIN users u ON u.id = m.user_id "
        "WHERE m.project_id = 1 AND u.active AND m.role = 'developer' "
        "AND m.user_id NOT IN (SELECT assignee_id FROM issues WHERE status = 'in_progress')",
    )
    assert h.call("assign_issue", issue_key=started, assignee_id=idle)["assignee_id"] == idle
    assert in_progress_count(h, idle) == 1


def test_in_progress_limit(h: EnvHarness) -> None:
    busy = member(h, "PAY", "developer")
    saturate(h, busy)
    other_work = issue(
        h, "p.key = 'PAY' AND i.status = 'in_progress' AND i.assignee_id != ? AND i.type != 'epic'", busy
    )
    message = fails(h, ErrorCode.LIMIT_EXCEEDED, "assign_issue", issue_key=other_work, assignee_id=busy)
    assert "limit 3" in message
    waiting = issue(h, "p.key = 'PAY' AND i.status = 'open' AND i.type != 'epic'")
    h.call("assign_issue", issue_key=waiting, assignee_id=busy)  # open work does not count
    fails(h, ErrorCode.LIMIT_EXCEEDED, "transition_issue", issue_key=waiting, status="in_progress")
    assert in_progress_count(h, busy) == 3


def test_transition_through_workflow(h: EnvHarness) -> None:
    key = issue(h, "p.key = 'PAY' AND i.status = 'open' AND i.type != 'epic'")
    h.call("assign_issue", issue_key=key, assignee_id=member(h, "PAY", "maintainer"))
    for status in ["in_progress", "review", "in_progress", "review", "done"]:
        result = h.call("transition_issue", issue_key=key, status=status)
        assert result["status"] == status
    assert result["resolved_on"] == TODAY_ISO and result["allowed_transitions"] == ["open"]
    assert h.call("transition_issue", issue_key=key, status="open")["resolved_on"] is None
    assert h.query("SELECT status, resolved_on FROM issues WHERE key = ?", key) == [("open", None)]


def test_parent_done_only_after_sub_issues(h: EnvHarness) -> None:
    epic = issue(h, "i.type = 'epic' AND i.status = 'in_progress'")
    h.call("transition_issue", issue_key=epic, status="review")
    message = fails(h, ErrorCode.PRECONDITION_FAILED, "transition_issue", issue_key=epic, status="done")
    unfinished = h.query(
        "SELECT key FROM issues WHERE parent_id = (SELECT id FROM issues WHERE key = ?) AND status != 'done'",
        epic,
    )
    assert unfinished and all(k in message for (k,) in unfinished)
    assert scalar(h, "SELECT status FROM issues WHERE key = ?", epic) == "review"


def test_add_comment(h: EnvHarness) -> None:
    viewer = member(h, "MOB", "viewer")
    key = issue(h, "p.key = 'MOB'")
    comment = h.call("add_comment", issue_key=key, author_id=viewer, body="  Looks good to me.  ")
    assert comment["issue_key"] == key and comment["author_id"] == viewer
    assert comment["body"] == "Looks good to me." and comment["created_on"] == TODAY_ISO
    assert h.call("get_issue", issue_key=key)["comments"][-1]["id"] == comment["id"]


def test_move_issue_to_sprint_and_back(h: EnvHarness) -> None:
    sprint_id = sprint_of(h, "WEB", "planned")
    key = issue(
        h, "p.key = 'WEB' AND i.sprint_id IS NULL AND i.story_points IS NOT NULL AND i.status != 'done'"
    )
    points = scalar(h, "SELECT story_points FROM issues WHERE key = ?", key)
    before = h.call("get_sprint", sprint_id=sprint_id)["committed_points"]
    planned = h.call("move_issue_to_sprint", issue_key=key, sprint_id=sprint_id)
    assert planned["sprint_id"] == sprint_id and planned["sprint"]
    after = h.call("get_sprint", sprint_id=sprint_id)
    assert after["committed_points"] == before + points and key in [i["key"] for i in after["issues"]]
    assert h.call("move_issue_to_sprint", issue_key=key, sprint_id=None)["sprint_id"] is None
    assert h.call("get_sprint", sprint_id=sprint_id)["committed_points"] == before


def test_add_project_member(h: EnvHarness) -> None:
    newcomer = outsider(h, "DATA")
    maintainer = member(h, "DATA", "maintainer")
    added = h.call(
        "add_project_member", project_key="DATA", user_id=newcomer, role="developer", requested_by=maintainer
    )
    assert added["project_key"] == "DATA" and added["role"] == "developer" and added["joined_on"] == TODAY_ISO
    key = issue(h, "p.key = 'DATA' AND i.status = 'open'")
    assert h.call("assign_issue", issue_key=key, assignee_id=newcomer)["assignee_id"] == newcomer
    roles = [u["role"] for u in h.call("find_users", project_key="DATA") if u["id"] == newcomer]
    assert roles == ["developer"]


# --- error paths: every tool, every rule; a failed call never changes the state ---------------------


class Case(NamedTuple):
    arguments: Args
    code: ErrorCode
    fragment: str


def _member_args(h: EnvHarness) -> dict[str, Any]:
    return {
        "project_key": "DATA",
        "user_id": outsider(h, "DATA"),
        "role": "reporter",
        "requested_by": member(h, "DATA", "maintainer"),
    }


BASE_ARGS: dict[str, Args] = {
    "create_issue": create_args,
    "add_comment": lambda h: {"body": "Any news?"},
    "add_project_member": _member_args,
}
NOT_FOUND, INVALID = ErrorCode.NOT_FOUND, ErrorCode.VALIDATION_ERROR
FORBIDDEN, PRECONDITION = ErrorCode.FORBIDDEN, ErrorCode.PRECONDITION_FAILED

ERROR_CASES: dict[str, dict[str, Case]] = {
    "get_issue": {"unknown issue": Case(lambda h: {"issue_key": "PAY-999"}, NOT_FOUND, "PAY-999")},
    "get_project": {"unknown project": Case(lambda h: {"project_key": "NOPE"}, NOT_FOUND, "NOPE")},
    "get_sprint": {"unknown sprint": Case(lambda h: {"sprint_id": 999}, NOT_FOUND, "999")},
    "project_report": {"unknown project": Case(lambda h: {"project_key": "NOPE"}, NOT_FOUND, "NOPE")},
    "search_issues": {
        "unknown project": Case(lambda h: {"project_key": "NOPE"}, NOT_FOUND, "no project"),
        "unknown assignee": Case(lambda h: {"assignee_id": 999}, NOT_FOUND, "no user"),
        "unknown sprint": Case(lambda h: {"sprint_id": 999}, NOT_FOUND, "no sprint"),
        "assignee and unassigned": Case(lambda h: {"assignee_id": 1, "unassigned": True}, INVALID, "either"),
        "sprint and backlog": Case(lambda h: {"sprint_id": 1, "backlog_only": True}, INVALID, "either"),
        "limit too small": Case(lambda h: {"limit": 0}, INVALID, "limit"),
        "unknown status": Case(lambda h: {"status": "closed"}, INVALID, "status"),
    },
    "find_users": {
        "role without project": Case(lambda h: {"role": "viewer"}, INVALID, "requires project_key"),
        "unknown project": Case(lambda h: {"project_key": "NOPE"}, NOT_FOUND, "no project"),
    },
    "create_issue": {
        "unknown project": Case(lambda h: {"project_key": "NOPE"}, NOT_FOUND, "no project"),
        "unknown reporter": Case(lambda h: {"reporter_id": 999}, NOT_FOUND, "no user"),
        "unknown parent": Case(lambda h: {"parent_key": "PAY-999"}, NOT_FOUND, "no issue"),
        "unknown assignee": Case(lambda h: {"assignee_id": 999}, NOT_FOUND, "no user"),
        "viewer reporter": Case(
            lambda h: {"reporter_id": member(h, "PAY", "viewer")}, FORBIDDEN, "may not report"
        ),
        "outsider reporter": Case(lambda h: {"reporter_id": outsider(h, "PAY")}, FORBIDDEN, "may not report"),
        "reporter-role assignee": Case(
            lambda h: {"assignee_id": member(h, "PAY", "reporter")}, FORBIDDEN, "is a reporter"
        ),
        "outsider assignee": Case(lambda h: {"assignee_id": outsider(h, "PAY")}, FORBIDDEN, "not a member"),
        "inactive assignee": Case(
            lambda h: {"assignee_id": inactive_member(h, "PAY")}, PRECONDITION, "inactive"
        ),
        "past due date": Case(lambda h: {"due_date": PAST}, INVALID, "in the past"),
        "parent in other project": Case(
            lambda h: {"parent_key": issue(h, "p.key = 'MOB'")}, INVALID, "another"
        ),
        "parent is a sub-issue": Case(
            lambda h: {"parent_key": issue(h, "p.key = 'PAY' AND i.parent_id IS NOT NULL")},
            INVALID,
            "sub-issue",
        ),
        "parent is done": Case(
            lambda h: {"parent_key": issue(h, "p.key = 'PAY' AND i.parent_id IS NULL AND i.status = 'done'")},
            PRECONDITION,
            "is done",
        ),
        "estimated epic": Case(lambda h: {"issue_type": "epic", "story_points": 3}, INVALID, "epics"),
        "title too short": Case(lambda h: {"title": "  ab "}, INVALID, "title"),
        "invalid estimate": Case(lambda h: {"story_points": 4}, INVALID, "story_points"),
        "archived project": Case(
            lambda h: {"project_key": "HR", "reporter_id": member(h, "HR", "maintainer")},
            PRECONDITION,
            "archived",
        ),
    },
    "update_issue": {
        "unknown issue": Case(lambda h: {"issue_key": "OPS-999", "priority": "low"}, NOT_FOUND, "OPS-999"),
        "nothing to update": Case(lambda h: {"issue_key": "PAY-2"}, INVALID, "nothing to update"),
        "past due date": Case(lambda h: {"issue_key": "PAY-2", "due_date": PAST}, INVALID, "in the past"),
        "estimated epic": Case(
            lambda h: {"issue_key": issue(h, "i.type = 'epic'"), "story_points": 5}, INVALID, "not estimated"
        ),
        "over sprint capacity": Case(
            lambda h: {"issue_key": tight_sprint_issue(h), "story_points": 13},
            ErrorCode.LIMIT_EXCEEDED,
            "left",
        ),
        "archived project": Case(
            lambda h: {"issue_key": "HR-1", "priority": "low"}, PRECONDITION, "archived"
        ),
    },
    "assign_issue": {
        "unknown issue": Case(lambda h: {"issue_key": "PAY-999", "assignee_id": 1}, NOT_FOUND, "no issue"),
        "unknown user": Case(lambda h: {"issue_key": "PAY-2", "assignee_id": 999}, NOT_FOUND, "no user"),
        "outsider": Case(
            lambda h: {"issue_key": "PAY-2", "assignee_id": outsider(h, "PAY")}, FORBIDDEN, "not a member"
        ),
        "viewer": Case(
            lambda h: {"issue_key": "PAY-2", "assignee_id": member(h, "PAY", "viewer")},
            FORBIDDEN,
            "is a viewer",
        ),
        "inactive user": Case(
            lambda h: {"issue_key": "PAY-2", "assignee_id": inactive_member(h, "PAY")},
            PRECONDITION,
            "inactive",
        ),
        "unassign work in progress": Case(
            lambda h: {"issue_key": issue(h, "i.status = 'in_progress'"), "assignee_id": None},
            PRECONDITION,
            "must keep an assignee",
        ),
        "unassign work in review": Case(
            lambda h: {"issue_key": issue(h, "i.status = 'review'"), "assignee_id": None},
            PRECONDITION,
            "must keep an assignee",
        ),
        "archived project": Case(
            lambda h: {"issue_key": "HR-3", "assignee_id": member(h, "HR", "maintainer")},
            PRECONDITION,
            "archived",
        ),
    },
    "transition_issue": {
        "unknown issue": Case(lambda h: {"issue_key": "WEB-999", "status": "review"}, NOT_FOUND, "WEB-999"),
        "skipping a step": Case(
            lambda h: {"issue_key": issue(h, "i.status = 'open'"), "status": "done"},
            PRECONDITION,
            "from open",
        ),
        "same status": Case(
            lambda h: {"issue_key": issue(h, "i.status = 'review'"), "status": "review"},
            PRECONDITION,
            "allowed",
        ),
        "start unassigned": Case(
            lambda h: {
                "issue_key": issue(h, "i.status = 'open' AND i.assignee_id IS NULL"),
                "status": "in_progress",
            },
            PRECONDITION,
            "no assignee",
        ),
        "reopen sub-issue of done parent": Case(
            lambda h: {
                "issue_key": issue(h, "i.parent_id IN (SELECT id FROM issues WHERE status = 'done')"),
                "status": "open",
            },
            PRECONDITION,
            "reopen it before",
        ),
        "unknown status": Case(lambda h: {"issue_key": "PAY-2", "status": "closed"}, INVALID, "status"),
        "archived project": Case(lambda h: {"issue_key": "HR-3", "status": "open"}, PRECONDITION, "archived"),
    },
    "add_comment": {
        "unknown issue": Case(lambda h: {"issue_key": "MOB-999", "author_id": 1}, NOT_FOUND, "no issue"),
        "unknown author": Case(lambda h: {"issue_key": "MOB-1", "author_id": 999}, NOT_FOUND, "no user"),
        "outsider": Case(
            lambda h: {"issue_key": "MOB-1", "author_id": outsider(h, "MOB")}, FORBIDDEN, "not a member"
        ),
        "blank body": Case(
            lambda h: {"issue_key": "MOB-1", "author_id": member(h, "MOB", "developer"), "body": "   "},
            INVALID,
            "body",
        ),
        "archived project": Case(
            lambda h: {"issue_key": "HR-3", "author_id": member(h, "HR", "maintainer")},
            PRECONDITION,
            "archived",
        ),
    },
    "move_issue_to_sprint": {
        "unknown issue": Case(lambda h: {"issue_key": "WEB-999", "sprint_id": 1}, NOT_FOUND, "no issue"),
        "unknown sprint": Case(
            lambda h: {"issue_key": issue(h, "i.sprint_id IS NULL"), "sprint_id": 999}, NOT_FOUND, "no sprint"
        ),
        "sprint of another project": Case(
            lambda h: {
                "issue_key": issue(h, "p.key = 'PAY' AND i.sprint_id IS NULL"),
                "sprint_id": sprint_of(h, "MOB", "planned"),
            },
            INVALID,
            "not a sprint of project PAY",
        ),
        "closed target sprint": Case(
            lambda h: {
                "issue_key": issue(
                    h, "p.key = 'PAY' AND i.sprint_id IS NULL AND i.status != 'done' AND i.type != 'epic'"
                ),
                "sprint_id": sprint_of(h, "PAY", "closed"),
            },
            PRECONDITION,
            "is closed",
        ),
        "issue in closed sprint": Case(
            lambda h: {
                "issue_key": issue(h, "i.sprint_id IN (SELECT id FROM sprints WHERE status = 'closed')"),
                "sprint_id": None,
            },
            PRECONDITION,
            "closed sprint",
        ),
        "done issue": Case(
            lambda h: into_planned_sprint(
                h, issue(h, "i.status = 'done' AND i.sprint_id IS NULL AND i.type != 'epic'")
            ),
            PRECONDITION,
            "is done",
        ),
        "already in sprint": Case(
            lambda h: {
                "issue_key": issue(h, "i.sprint_id = ?", sprint_of(h, "OPS", "active")),
                "sprint_id": sprint_of(h, "OPS", "active"),
            },
            ErrorCode.CONFLICT,
            "already in sprint",
        ),
        "already in backlog": Case(
            lambda h: {"issue_key": issue(h, "i.sprint_id IS NULL"), "sprint_id": None},
            ErrorCode.CONFLICT,
            "already in the backlog",
        ),
        "epic": Case(lambda h: into_planned_sprint(h, issue(h, "i.type = 'epic'")), INVALID, "is an epic"),
        "unestimated": Case(
            lambda h: into_planned_sprint(h, issue(h, "i.type != 'epic' AND i.story_points IS NULL")),
            PRECONDITION,
            "no story points",
        ),
        "over capacity": Case(over_capacity_plan, ErrorCode.LIMIT_EXCEEDED, "points left"),
        "archived project": Case(
            lambda h: {"issue_key": "HR-3", "sprint_id": None}, PRECONDITION, "archived"
        ),
    },
    "add_project_member": {
        "unknown project": Case(lambda h: {"project_key": "NOPE"}, NOT_FOUND, "no project"),
        "unknown requester": Case(lambda h: {"requested_by": 999}, NOT_FOUND, "no user"),
        "unknown user": Case(lambda h: {"user_id": 999}, NOT_FOUND, "no user"),
        "requester not maintainer": Case(
            lambda h: {"requested_by": member(h, "DATA", "developer")}, FORBIDDEN, "not a maintainer"
        ),
        "inactive user": Case(
            lambda h: {"user_id": scalar(h, "SELECT id FROM users WHERE NOT active")},
            PRECONDITION,
            "inactive",
        ),
        "already a member": Case(
            lambda h: {"user_id": member(h, "DATA", "viewer")}, ErrorCode.CONFLICT, "already a viewer"
        ),
        "archived project": Case(
            lambda h: {
                "project_key": "HR",
                "user_id": outsider(h, "HR"),
                "requested_by": member(h, "HR", "maintainer"),
            },
            PRECONDITION,
            "archived",
        ),
    },
}


ERROR_PARAMS = [(tool, name) for tool, cases in ERROR_CASES.items() for name in cases]


@pytest.mark.parametrize(
    ("tool", "case"), ERROR_PARAMS, ids=[f"{tool}-{name}" for tool, name in ERROR_PARAMS]
)
def test_error_paths(h: EnvHarness, tool: str, case: str) -> None:
    arguments, code, fragment = ERROR_CASES[tool][case]
    base = BASE_ARGS.get(tool, lambda h: {})(h)
    before = h.state.state_hash()
    message = fails(h, code, tool, **base | arguments(h))
    assert fragment in message
    assert h.state.state_hash() == before


def test_every_tool_has_error_cases() -> None:
    assert set(ERROR_CASES) == set(env.tools)
    writes = {name for name, spec in env.tools.items() if spec.mutates}
    assert all("archived project" in ERROR_CASES[tool] for tool in writes)


# --- arguments and catalogue --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("get_sprint", {"sprint_id": "three"}),
        (
            "create_issue",
            {"project_key": "PAY", "reporter_id": "abc", "title": "Valid title", "issue_type": "bug"},
        ),
        ("get_issue", {}),
        ("assign_issue", {"issue_key": "PAY-2"}),
        ("get_issue", {"issue_key": "PAY-2", "verbose": True}),
    ],
    ids=[
        "wrong type",
        "wrong type in a write",
        "missing argument",
        "missing nullable argument",
        "unknown field",
    ],
)
def test_argument_validation(h: EnvHarness, tool: str, arguments: dict[str, Any]) -> None:
    fails(h, ErrorCode.VALIDATION_ERROR, tool, **arguments)


def test_unknown_tool(h: EnvHarness) -> None:
    fails(h, ErrorCode.UNKNOWN_TOOL, "delete_project", project_key="PAY")


def test_tool_catalog() -> None:
    reads = {"get_issue", "search_issues", "find_users", "get_project", "get_sprint", "project_report"}
    writes = {
        "create_issue",
        "update_issue",
        "assign_issue",
        "transition_issue",
        "add_comment",
        "move_issue_to_sprint",
        "add_project_member",
    }
    assert set(env.tools) == reads | writes
    assert {name for name, spec in env.tools.items() if spec.mutates} == writes
    for spec in env.tools.values():
        assert spec.description and "Args:" not in spec.description
        for name, schema in spec.input_schema["properties"].items():
            assert schema.get("description"), f"{spec.name}.{name} is undocumented"
