"""The tracker's tools: lookups, searches and reports, and the writes that enforce its workflow rules."""

from __future__ import annotations

from collections import Counter
from datetime import date
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, joinedload, selectinload
from sqlalchemy.orm.interfaces import LoaderOption

from environments.library.project_tracker.core import (
    ASSIGNABLE_ROLES,
    MAX_IN_PROGRESS_PER_USER,
    PRIORITY_RANK,
    TODAY,
    TRANSITIONS,
    env,
)
from environments.library.project_tracker.models import (
    Comment,
    Issue,
    IssueType,
    Membership,
    Priority,
    Project,
    Role,
    Sprint,
    Status,
    StoryPoints,
    User,
)
from environments.sdk import (
    Conflict,
    Forbidden,
    LimitExceeded,
    NotFound,
    PreconditionFailed,
    ValidationFailed,
    orm_to_dict,
)

Title = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=200)]
CommentBody = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
Limit = Annotated[int, Field(ge=1, le=100)]


# --- lookups and rule checks shared by the tools ---------------------------------------------------


def _project(db: Session, key: str, *options: LoaderOption) -> Project:
    project = db.scalar(select(Project).options(*options).where(Project.key == key.strip().upper()))
    if project is None:
        raise NotFound(f"no project with key {key!r}")
    return project


def _writable_project(db: Session, key: str) -> Project:
    project = _project(db, key)
    _require_active_project(project)
    return project


def _require_active_project(project: Project) -> None:
    if project.status == "archived":
        raise PreconditionFailed(f"project {project.key} is archived and read-only")


def _issue(db: Session, key: str, *options: LoaderOption) -> Issue:
    issue = db.scalar(select(Issue).options(*options).where(Issue.key == key.strip().upper()))
    if issue is None:
        raise NotFound(f"no issue with key {key!r}")
    return issue


def _writable_issue(db: Session, key: str) -> Issue:
    issue = _issue(db, key)
    _require_active_project(issue.project)
    return issue


def _user(db: Session, user_id: int) -> User:
    user = db.get(User, user_id)
    if user is None:
        raise NotFound(f"no user with id {user_id}")
    return user


def _sprint(db: Session, sprint_id: int, *options: LoaderOption) -> Sprint:
    sprint = db.get(Sprint, sprint_id, options=options)
    if sprint is None:
        raise NotFound(f"no sprint with id {sprint_id}")
    return sprint


def _role(db: Session, project: Project, user: User) -> str | None:
    return db.scalar(
        select(Membership.role).where(Membership.project_id == project.id, Membership.user_id == user.id)
    )


def _require_assignable(db: Session, project: Project, user: User) -> None:
    if not user.active:
        raise PreconditionFailed(f"user {user.id} ({user.name}) is inactive and cannot take work")
    role = _role(db, project, user)
    if role not in ASSIGNABLE_ROLES:
        held = f"is a {role}" if role else "is not a member"
        raise Forbidden(
            f"user {user.id} ({user.name}) {held} of project {project.key}; only maintainers and developers "
            "can be assigned"
        )


def _require_wip_room(db: Session, user: User, issue: Issue) -> None:
    busy = db.scalar(
        select(func.count())
        .select_from(Issue)
        .where(Issue.assignee_id == user.id, Issue.status == "in_progress", Issue.id != issue.id)
    )
    if busy >= MAX_IN_PROGRESS_PER_USER:
        raise LimitExceeded(
            f"user {user.id} ({user.name}) already has {busy} issues in progress "
            f"(limit {MAX_IN_PROGRESS_PER_USER}); cannot take on {issue.key}"
        )


def _committed_points(db: Session, sprint: Sprint, excluding: Issue | None = None) -> int:
    query = select(func.coalesce(func.sum(Issue.story_points), 0)).where(Issue.sprint_id == sprint.id)
    if excluding is not None:
        query = query.where(Issue.id != excluding.id)
    return db.scalar(query)


def _require_capacity(db: Session, sprint: Sprint, issue: Issue) -> None:
    committed = _committed_points(db, sprint, excluding=issue)
    if committed + (issue.story_points or 0) > sprint.capacity_points:
        raise LimitExceeded(
            f"sprint {sprint.id} ({sprint.name}) has {sprint.capacity_points - committed} of "
            f"{sprint.capacity_points} points left; {issue.key} needs {issue.story_points}"
        )


def _require_future(due_date: date | None) -> None:
    if due_date is not None and due_date < TODAY:
        raise ValidationFailed(
            f"due date {due_date.isoformat()} is in the past (today is {TODAY.isoformat()})"
        )


def _require_valid_parent(parent: Issue, project: Project) -> None:
    if parent.project_id != project.id:
        raise ValidationFailed(f"parent {parent.key} belongs to another project than {project.key}")
    if parent.parent_id is not None:
        raise ValidationFailed(f"parent {parent.key} is itself a sub-issue; only two levels are allowed")
    if parent.status == "done":
        raise PreconditionFailed(f"parent {parent.key} is done; reopen it before adding sub-issues")


# --- serialisation ----------------------------------------------------------------------------------

# Loader options fetching what ``_summary`` and ``_detail`` read along with the issues.
_SUMMARY_LOAD = (joinedload(Issue.assignee), joinedload(Issue.parent))
_DETAIL_LOAD = (
    *_SUMMARY_LOAD,
    joinedload(Issue.project),
    joinedload(Issue.reporter),
    joinedload(Issue.sprint),
    # One issue: its (few) sub-issues and comments join in the same query, ordered by their ids.
    joinedload(Issue.children).joinedload(Issue.assignee),
    joinedload(Issue.comments).joinedload(Comment.author),
)


def _summary(issue: Issue) -> dict[str, Any]:
    return {
        "key": issue.key,
        "title": issue.title,
        "type": issue.type,
        "priority": issue.priority,
        "status": issue.status,
        "assignee_id": issue.assignee_id,
        "assignee": issue.assignee.name if issue.assignee else None,
        "story_points": issue.story_points,
        "sprint_id": issue.sprint_id,
        "parent_key": issue.parent.key if issue.parent else None,
        "due_date": issue.due_date,
    }


def _detail(issue: Issue) -> dict[str, Any]:
    return {
        **orm_to_dict(issue),
        "project_key": issue.project.key,
        "reporter": issue.reporter.name,
        "assignee": issue.assignee.name if issue.assignee else None,
        "parent_key": issue.parent.key if issue.parent else None,
        "sprint": issue.sprint.name if issue.sprint else None,
        "allowed_transitions": list(TRANSITIONS[issue.status]),
        "sub_issues": [_summary(child) for child in issue.children],
        "comments": [_comment(c) for c in issue.comments],
    }


def _saved(db: Session, issue: Issue) -> dict[str, Any]:
    """Flush pending changes (so foreign-key columns follow relationships) and describe the issue."""
    db.flush()
    return _detail(issue)


def _comment(comment: Comment) -> dict[str, Any]:
    return {**orm_to_dict(comment), "author": comment.author.name}


def _committed_points_by_sprint(db: Session, sprints: list[Sprint]) -> dict[int, int]:
    """Story points planned in each of ``sprints`` (0 for a sprint without estimated issues)."""
    points = db.execute(
        select(Issue.sprint_id, func.sum(Issue.story_points))
        .where(Issue.sprint_id.in_([s.id for s in sprints]))
        .group_by(Issue.sprint_id)
    )
    return {sprint.id: 0 for sprint in sprints} | {sprint_id: total or 0 for sprint_id, total in points}


def _sprint_brief(sprint: Sprint, committed: int) -> dict[str, Any]:
    return {
        **orm_to_dict(sprint),
        "committed_points": committed,
        "remaining_capacity": sprint.capacity_points - committed,
    }


def _unfinished_issues(db: Session, project: Project) -> list[Issue]:
    query = (
        select(Issue)
        .options(*_SUMMARY_LOAD)
        .where(Issue.project_id == project.id, Issue.status != "done")
        .order_by(Issue.id)
    )
    return list(db.scalars(query))


# --- reads --------------------------------------------------------------------------------------------


@env.tool
def get_issue(db: Session, issue_key: str) -> dict:
    """Get one issue with its sub-issues, comments and the statuses it may move to next.

    Args:
        issue_key: The issue key, e.g. "PAY-12".
    """
    return _detail(_issue(db, issue_key, *_DETAIL_LOAD))


@env.tool
def search_issues(
    db: Session,
    project_key: str | None = None,
    status: Status | None = None,
    issue_type: IssueType | None = None,
    priority: Priority | None = None,
    assignee_id: int | None = None,
    sprint_id: int | None = None,
    text: str | None = None,
    unassigned: bool = False,
    backlog_only: bool = False,
    overdue: bool = False,
    sort_by: Literal["priority", "due_date", "created", "key"] = "priority",
    limit: Limit = 20,
) -> dict:
    """Search issues with optional filters; returns the total number of matches and the first `limit`.

    Args:
        project_key: Only issues of this project, e.g. "PAY".
        status: Only issues in this workflow status.
        issue_type: Only issues of this type.
        priority: Only issues of this priority.
        assignee_id: Only issues assigned to this user.
        sprint_id: Only issues planned in this sprint.
        text: Case-insensitive substring of the title.
        unassigned: Only issues without an assignee.
        backlog_only: Only issues not planned in any sprint.
        overdue: Only unfinished issues whose due date is before today.
        sort_by: priority (highest first), due_date (soonest first, undated last), created (newest first)
            or key (project and number).
        limit: Maximum number of issues returned (1-100).
    """
    if unassigned and assignee_id is not None:
        raise ValidationFailed("use either assignee_id or unassigned, not both")
    if backlog_only and sprint_id is not None:
        raise ValidationFailed("use either sprint_id or backlog_only, not both")
    query = select(Issue)
    if project_key is not None:
        query = query.where(Issue.project_id == _project(db, project_key).id)
    if assignee_id is not None:
        query = query.where(Issue.assignee_id == _user(db, assignee_id).id)
    if sprint_id is not None:
        query = query.where(Issue.sprint_id == _sprint(db, sprint_id).id)
    for column, value in ((Issue.status, status), (Issue.type, issue_type), (Issue.priority, priority)):
        if value is not None:
            query = query.where(column == value)
    if text:
        query = query.where(Issue.title.icontains(text.strip(), autoescape=True))
    if unassigned:
        query = query.where(Issue.assignee_id.is_(None))
    if backlog_only:
        query = query.where(Issue.sprint_id.is_(None))
    if overdue:
        query = query.where(Issue.due_date < TODAY, Issue.status != "done")
    order = {
        "priority": [case(PRIORITY_RANK, value=Issue.priority).desc()],
        "due_date": [Issue.due_date.is_(None), Issue.due_date],
        "created": [Issue.created_on.desc()],
        "key": [Issue.project_id],
    }[sort_by]
    total = db.scalar(select(func.count()).select_from(query.subquery()))
    issues = db.scalars(query.options(*_SUMMARY_LOAD).order_by(*order, Issue.id).limit(limit))
    return {"total_matches": total, "issues": [_summary(i) for i in issues]}


@env.tool
def find_users(
    db: Session,
    name: str | None = None,
    project_key: str | None = None,
    role: Role | None = None,
    include_inactive: bool = False,
) -> list[dict]:
    """Find users by name or e-mail fragment, optionally only members of a project (with their role).

    Args:
        name: Case-insensitive substring of the user's name or e-mail.
        project_key: Only members of this project; adds each member's role.
        role: Only members with this role (requires project_key).
        include_inactive: Also list users who have left the company.
    """
    if role is not None and project_key is None:
        raise ValidationFailed("role filter requires project_key")
    query = select(User).order_by(User.name, User.id)
    roles: dict[int, str] = {}
    if project_key is not None:
        members = select(Membership.user_id, Membership.role).where(
            Membership.project_id == _project(db, project_key).id
        )
        roles = {user_id: r for user_id, r in db.execute(members) if role in (None, r)}
        query = query.where(User.id.in_(roles))
    if name:
        fragment = name.strip()
        query = query.where(
            User.name.icontains(fragment, autoescape=True) | User.email.icontains(fragment, autoescape=True)
        )
    if not include_inactive:
        query = query.where(User.active.is_(True))
    return [{**orm_to_dict(u), **({"role": roles[u.id]} if project_key else {})} for u in db.scalars(query)]


@env.tool
def get_project(db: Session, project_key: str) -> dict:
    """Get a project with its lead, members and roles, sprints and issue counts by status.

    Args:
        project_key: The project key, e.g. "MOB".
    """
    project = _project(
        db,
        project_key,
        joinedload(Project.lead),
        selectinload(Project.memberships).joinedload(Membership.user),
        selectinload(Project.sprints),
    )
    committed = _committed_points_by_sprint(db, project.sprints)
    counts = db.execute(
        select(Issue.status, func.count()).where(Issue.project_id == project.id).group_by(Issue.status)
    )
    return {
        **orm_to_dict(project),
        "lead": project.lead.name,
        "members": [
            {
                "user_id": m.user_id,
                "name": m.user.name,
                "role": m.role,
                "joined_on": m.joined_on,
                "active": m.user.active,
            }
            for m in project.memberships
        ],
        "sprints": [_sprint_brief(s, committed[s.id]) for s in project.sprints],
        "issues_by_status": {status: 0 for status in TRANSITIONS} | dict(counts.all()),
    }


@env.tool
def get_sprint(db: Session, sprint_id: int) -> dict:
    """Get a sprint with its issues, committed and completed story points and remaining capacity.

    Args:
        sprint_id: The sprint's id.
    """
    sprint = _sprint(
        db, sprint_id, joinedload(Sprint.project), selectinload(Sprint.issues).options(*_SUMMARY_LOAD)
    )
    committed = sum(i.story_points or 0 for i in sprint.issues)
    completed = sum(i.story_points or 0 for i in sprint.issues if i.status == "done")
    return {
        **_sprint_brief(sprint, committed),
        "project_key": sprint.project.key,
        "completed_points": completed,
        "issues": [_summary(i) for i in sprint.issues],
    }


@env.tool
def project_report(db: Session, project_key: str) -> dict:
    """Report on a project's unfinished work: counts by priority and type, per-assignee workload,
    overdue issues, and the velocity (completed points) of its closed sprints.

    Args:
        project_key: The project key, e.g. "OPS".
    """
    project = _project(db, project_key, selectinload(Project.sprints).selectinload(Sprint.issues))
    unfinished = _unfinished_issues(db, project)
    workload: dict[int, dict[str, Any]] = {}
    for issue in sorted((i for i in unfinished if i.assignee), key=lambda i: i.assignee.name):
        row = workload.setdefault(
            issue.assignee.id,
            {
                "user_id": issue.assignee.id,
                "name": issue.assignee.name,
                "open_issues": 0,
                "in_progress": 0,
                "open_points": 0,
            },
        )
        row["open_issues"] += 1
        row["in_progress"] += issue.status == "in_progress"
        row["open_points"] += issue.story_points or 0
    by_priority = Counter(i.priority for i in unfinished)
    overdue = sorted((i for i in unfinished if i.due_date and i.due_date < TODAY), key=lambda i: i.due_date)
    return {
        "project_key": project.key,
        "unfinished_issues": len(unfinished),
        "unassigned_unfinished": sum(i.assignee_id is None for i in unfinished),
        "unfinished_by_priority": {p: by_priority[p] for p in reversed(PRIORITY_RANK) if by_priority[p]},
        "unfinished_by_type": dict(Counter(i.type for i in unfinished)),
        "workload": list(workload.values()),
        "overdue": [{**_summary(i), "days_overdue": (TODAY - i.due_date).days} for i in overdue],
        "velocity": [
            {
                "sprint_id": s.id,
                "name": s.name,
                "committed_points": sum(i.story_points or 0 for i in s.issues),
                "completed_points": sum(i.story_points or 0 for i in s.issues if i.status == "done"),
            }
            for s in project.sprints
            if s.status == "closed"
        ],
    }


# --- writes -------------------------------------------------------------------------------------------


@env.tool(mutates=True)
def create_issue(
    db: Session,
    project_key: str,
    reporter_id: int,
    title: Title,
    issue_type: IssueType,
    priority: Priority = "medium",
    description: str = "",
    assignee_id: int | None = None,
    parent_key: str | None = None,
    story_points: StoryPoints | None = None,
    due_date: date | None = None,
) -> dict:
    """Create an open issue in a project's backlog. The reporter must be a project member (not a viewer);
    an assignee must be an active maintainer or developer of the project.

    Args:
        project_key: The project key, e.g. "WEB".
        reporter_id: The user reporting the issue.
        title: A one-line summary (3-200 characters).
        issue_type: epic, story, task or bug.
        priority: lowest, low, medium, high or critical.
        description: Longer free-text description.
        assignee_id: The user to assign, if any.
        parent_key: Key of a top-level issue of the same project to nest this issue under.
        story_points: Estimate (1, 2, 3, 5, 8 or 13); epics are not estimated.
        due_date: Due date (ISO date, not before today).
    """
    project = _writable_project(db, project_key)
    reporter = _user(db, reporter_id)
    if _role(db, project, reporter) in (None, "viewer"):
        raise Forbidden(
            f"user {reporter.id} ({reporter.name}) may not report issues in project {project.key}"
        )
    _require_future(due_date)
    if issue_type == "epic" and (parent_key or story_points):
        raise ValidationFailed("epics cannot have a parent or story points")
    parent = _issue(db, parent_key) if parent_key else None
    if parent is not None:
        _require_valid_parent(parent, project)
    assignee = _user(db, assignee_id) if assignee_id is not None else None
    if assignee is not None:
        _require_assignable(db, project, assignee)
    number = db.scalar(select(func.count()).select_from(Issue).where(Issue.project_id == project.id)) + 1
    issue = Issue(
        key=f"{project.key}-{number}",
        project=project,
        title=title,
        description=description.strip(),
        type=issue_type,
        priority=priority,
        status="open",
        reporter=reporter,
        assignee=assignee,
        parent=parent,
        story_points=story_points,
        created_on=TODAY,
        due_date=due_date,
    )
    db.add(issue)
    return _saved(db, issue)


@env.tool(mutates=True)
def update_issue(
    db: Session,
    issue_key: str,
    title: Title | None = None,
    description: str | None = None,
    priority: Priority | None = None,
    story_points: StoryPoints | None = None,
    due_date: date | None = None,
) -> dict:
    """Change an issue's title, description, priority, estimate or due date (omitted fields are kept).
    A new estimate must still fit in the capacity of the issue's sprint.

    Args:
        issue_key: The issue key, e.g. "DATA-7".
        title: New one-line summary.
        description: New description.
        priority: New priority.
        story_points: New estimate (1, 2, 3, 5, 8 or 13); not for epics.
        due_date: New due date (not before today).
    """
    changes = {
        "title": title,
        "description": description,
        "priority": priority,
        "story_points": story_points,
        "due_date": due_date,
    }
    changes = {field: value for field, value in changes.items() if value is not None}
    if not changes:
        raise ValidationFailed("nothing to update: give at least one field")
    issue = _writable_issue(db, issue_key)
    _require_future(due_date)
    if story_points is not None and issue.type == "epic":
        raise ValidationFailed(f"{issue.key} is an epic; epics are not estimated")
    for field, value in changes.items():
        setattr(issue, field, value)
    if story_points is not None and issue.sprint is not None:
        _require_capacity(db, issue.sprint, issue)
    return _saved(db, issue)


@env.tool(mutates=True)
def assign_issue(db: Session, issue_key: str, assignee_id: int | None) -> dict:
    """Assign an issue to a user, or unassign it with null. The assignee must be an active maintainer or
    developer of the project; an issue in progress counts towards the assignee's limit of 3.

    Args:
        issue_key: The issue key, e.g. "MOB-3".
        assignee_id: The user to assign, or null to unassign (not allowed while in progress or review).
    """
    issue = _writable_issue(db, issue_key)
    if assignee_id is None:
        if issue.status in ("in_progress", "review"):
            raise PreconditionFailed(f"{issue.key} is in status {issue.status} and must keep an assignee")
        issue.assignee = None
        return _saved(db, issue)
    user = _user(db, assignee_id)
    _require_assignable(db, issue.project, user)
    if issue.status == "in_progress":
        _require_wip_room(db, user, issue)
    issue.assignee = user
    return _saved(db, issue)


@env.tool(mutates=True)
def transition_issue(db: Session, issue_key: str, status: Status) -> dict:
    """Move an issue along the workflow open -> in_progress -> review -> done (review may go back to
    in_progress; done may be reopened to open). Starting work needs an assignee with fewer than 3 issues in
    progress; an issue is done only when all its sub-issues are; a sub-issue of a done parent cannot reopen.

    Args:
        issue_key: The issue key, e.g. "OPS-21".
        status: The target status.
    """
    issue = _writable_issue(db, issue_key)
    if status not in TRANSITIONS[issue.status]:
        allowed = ", ".join(TRANSITIONS[issue.status])
        raise PreconditionFailed(
            f"{issue.key} cannot go from {issue.status} to {status} (allowed: {allowed})"
        )
    if status == "in_progress":
        if issue.assignee is None:
            raise PreconditionFailed(f"{issue.key} has no assignee; assign it before starting work")
        _require_wip_room(db, issue.assignee, issue)
    if status == "done":
        unfinished = [child.key for child in issue.children if child.status != "done"]
        if unfinished:
            raise PreconditionFailed(f"{issue.key} has unfinished sub-issues: {', '.join(unfinished)}")
    if status == "open" and issue.parent is not None and issue.parent.status == "done":
        raise PreconditionFailed(f"parent {issue.parent.key} is done; reopen it before reopening {issue.key}")
    issue.status = status
    issue.resolved_on = TODAY if status == "done" else None
    return _saved(db, issue)


@env.tool(mutates=True)
def add_comment(db: Session, issue_key: str, author_id: int, body: CommentBody) -> dict:
    """Comment on an issue; only members of the issue's project may comment.

    Args:
        issue_key: The issue key, e.g. "PAY-4".
        author_id: The commenting user.
        body: The comment text (1-2000 characters).
    """
    issue = _writable_issue(db, issue_key)
    author = _user(db, author_id)
    if _role(db, issue.project, author) is None:
        raise Forbidden(f"user {author.id} ({author.name}) is not a member of project {issue.project.key}")
    comment = Comment(issue=issue, author=author, body=body, created_on=TODAY)
    db.add(comment)
    db.flush()
    return {**_comment(comment), "issue_key": issue.key}


@env.tool(mutates=True)
def move_issue_to_sprint(db: Session, issue_key: str, sprint_id: int | None) -> dict:
    """Plan an estimated, unfinished issue into an open (planned or active) sprint of its project, or move
    it back to the backlog with null. A sprint's committed story points may not exceed its capacity.

    Args:
        issue_key: The issue key, e.g. "WEB-15".
        sprint_id: The target sprint, or null for the backlog.
    """
    issue = _writable_issue(db, issue_key)
    sprint = _sprint(db, sprint_id) if sprint_id is not None else None
    if sprint is not None and sprint.project_id != issue.project_id:
        raise ValidationFailed(
            f"sprint {sprint.id} ({sprint.name}) is not a sprint of project {issue.project.key}"
        )
    if sprint is not None and issue.type == "epic":
        raise ValidationFailed(f"{issue.key} is an epic; plan its sub-issues instead")
    if issue.sprint_id == sprint_id:
        raise Conflict(f"{issue.key} is already in {f'sprint {sprint.name}' if sprint else 'the backlog'}")
    if issue.sprint is not None and issue.sprint.status == "closed":
        raise PreconditionFailed(f"{issue.key} belongs to closed sprint {issue.sprint.name} and cannot move")
    if issue.status == "done":
        raise PreconditionFailed(f"{issue.key} is done; reopen it before planning it")
    if sprint is not None:
        if sprint.status == "closed":
            raise PreconditionFailed(f"sprint {sprint.id} ({sprint.name}) is closed")
        if issue.story_points is None:
            raise PreconditionFailed(f"{issue.key} has no story points; estimate it before planning")
        _require_capacity(db, sprint, issue)
    issue.sprint = sprint
    return _saved(db, issue)


@env.tool(mutates=True)
def add_project_member(db: Session, project_key: str, user_id: int, role: Role, requested_by: int) -> dict:
    """Add an active user to a project with a role; only the project's maintainers may add members.

    Args:
        project_key: The project key, e.g. "DATA".
        user_id: The user to add.
        role: maintainer, developer, reporter or viewer.
        requested_by: The maintainer making the change.
    """
    project = _writable_project(db, project_key)
    requester = _user(db, requested_by)
    if _role(db, project, requester) != "maintainer":
        raise Forbidden(
            f"user {requester.id} ({requester.name}) is not a maintainer of project {project.key}"
        )
    user = _user(db, user_id)
    if not user.active:
        raise PreconditionFailed(f"user {user.id} ({user.name}) is inactive")
    existing = _role(db, project, user)
    if existing is not None:
        raise Conflict(f"user {user.id} ({user.name}) is already a {existing} of project {project.key}")
    membership = Membership(project=project, user=user, role=role, joined_on=TODAY)
    db.add(membership)
    db.flush()
    return {**orm_to_dict(membership), "project_key": project.key, "name": user.name}
