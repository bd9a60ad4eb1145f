"""Deterministic seed data: six projects with members, sprints, issues and comments."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, timedelta

from sqlalchemy.orm import Session

from environments.library.project_tracker.core import ASSIGNABLE_ROLES, MAX_IN_PROGRESS_PER_USER, TODAY, env
from environments.library.project_tracker.models import Comment, Issue, Membership, Project, Sprint, User

FIRST_NAMES = [
    "Amara", "Bjorn", "Chen", "Dalia", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kavya", "Liam",
    "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yusuf",
    "Zara", "Aoife", "Lucas", "Marta", "Noah", "Sofia",
]  # fmt: skip
LAST_NAMES = [
    "Okafor", "Lindqvist", "Wei", "Haddad", "Petrova", "Rahimi", "Mensah", "Tanaka", "Duarte", "Becker",
    "Iyer", "O'Brien", "Alvarez", "Kowalski", "Farouk", "Sharma", "Murphy", "Castillo", "Nilsson", "Aziz",
    "Moreau", "Novak", "Zhang", "Demir", "Khan", "Gallagher", "Rossi", "Jensen", "Silva", "Fischer",
]  # fmt: skip
JOB_TITLES = [
    "Backend Engineer", "Frontend Engineer", "Mobile Engineer", "QA Engineer", "Site Reliability Engineer",
    "Data Engineer", "Product Manager", "Product Designer", "Engineering Manager", "Security Engineer",
]  # fmt: skip
CITIES = [
    "Berlin",
    "Lisbon",
    "Toronto",
    "Austin",
    "Dublin",
    "Bangalore",
    "Nairobi",
    "Warsaw",
    "Osaka",
    "Madrid",
]


@dataclass(frozen=True)
class ProjectSpec:
    key: str
    name: str
    description: str
    status: str
    created_on: date
    epics: tuple[str, ...]
    components: tuple[str, ...]


PROJECTS = [
    ProjectSpec(
        "PAY", "Payments Platform", "Card processing, refunds and merchant payouts.", "active",
        date(2025, 3, 3),
        ("Multi-currency payouts", "PCI DSS 4.0 compliance", "Refund automation"),
        ("checkout API", "refund service", "payout scheduler", "fraud scoring", "card vault", "invoice PDF"),
    ),
    ProjectSpec(
        "MOB", "Mobile App", "The iOS and Android shopping app.", "active", date(2025, 5, 12),
        ("Offline cart", "Push notification revamp", "Accessibility audit fixes"),
        ("login screen", "product gallery", "cart sync", "push service", "deep links", "settings page"),
    ),
    ProjectSpec(
        "WEB", "Web Storefront", "Customer-facing storefront and account pages.", "active", date(2025, 1, 20),
        ("Checkout redesign", "Core Web Vitals", "Wishlist sharing"),
        ("search bar", "product page", "checkout form", "account page", "promo banner", "sitemap"),
    ),
    ProjectSpec(
        "DATA", "Data Warehouse", "Ingestion pipelines, dbt models and BI dashboards.", "active",
        date(2025, 7, 7),
        ("Migrate to incremental models", "GDPR data retention", "Revenue dashboard v2"),
        ("orders pipeline", "dbt models", "Looker dashboards", "event ingestion", "CDC connector",
         "data catalog"),
    ),
    ProjectSpec(
        "OPS", "Infrastructure", "Kubernetes clusters, CI/CD and observability.", "active", date(2024, 11, 4),
        ("Kubernetes 1.31 upgrade", "Cost reduction Q2", "On-call tooling"),
        ("CI runners", "ingress gateway", "Terraform modules", "alerting rules", "backup jobs",
         "secrets manager"),
    ),
    ProjectSpec(
        "HR", "People Portal", "Internal portal for leave requests and reviews (retired).", "archived",
        date(2024, 9, 2),
        ("Leave request workflow", "Performance review forms"),
        ("leave calendar", "review forms", "org chart", "payroll export"),
    ),
]  # fmt: skip

TITLE_TEMPLATES = {
    "bug": [
        "{c} returns 500 when the session expires", "{c} shows stale data after refresh",
        "{c} times out under peak load", "Crash in {c} on older Android devices",
        "{c} ignores locale settings",
        "Duplicate events emitted by {c}", "{c} leaks memory during long sessions",
    ],
    "story": [
        "Support saved filters in {c}", "Add audit trail to {c}", "Allow bulk export from {c}",
        "Show progress indicator in {c}", "Add dark mode to {c}", "Let admins configure limits in {c}",
    ],
    "task": [
        "Upgrade dependencies of {c}", "Write runbook for {c}", "Add latency metrics to {c}",
        "Refactor configuration of {c}", "Remove dead feature flags in {c}", "Increase test coverage of {c}",
    ],
}  # fmt: skip
DESCRIPTIONS = {
    "epic": "Umbrella for the work needed to deliver this milestone.",
    "bug": "Steps to reproduce are in the linked support ticket. Expected: no error. Actual: see logs.",
    "story": "Requested by several customers; acceptance criteria agreed with product.",
    "task": "Housekeeping work, no user-visible change expected.",
}
COMMENTS = [
    "I can reproduce this on staging.", "Could you attach the logs from the failing run?",
    "Fix is up for review, see the linked pull request.",
    "Blocked on the API contract with the platform team.",
    "Added a regression test for this case.", "Moved to the next sprint, we ran out of capacity.",
    "Discussed in standup: let's split this into two tickets.", "Verified on production, closing soon.",
    "This also affects the legacy endpoint.", "Product confirmed the expected behaviour.",
    "Design mock-ups are in the shared folder.", "Pairing on this tomorrow morning.",
    "Rolled back the first attempt, it broke the nightly build.", "Estimate looks high, can we trim scope?",
    "Customer escalation came in for this one.", "Docs updated.",
]  # fmt: skip
SPRINT_GOALS = [
    "Burn down critical bugs", "Hardening and tech debt", "Beta release readiness", "Performance pass",
    "Close out milestone work", "Customer escalations first",
]  # fmt: skip
POINTS = [1, 2, 3, 5, 8, 13]
POINT_WEIGHTS = [3, 5, 6, 5, 3, 1]
ACTIVE_SPRINT_STATUSES = (["open", "in_progress", "review", "done"], [25, 30, 20, 25])
SPRINT_DAYS = 14
PLANNING_WEIGHTS = {"closed": 3, "active": 3, "planned": 1}  # relative to 3 for the backlog


@dataclass
class SeedState:
    """Shared counters of one seed build (ids and per-user work in progress)."""

    users: list[User]
    ids: dict[str, itertools.count[int]] = field(
        default_factory=lambda: {t: itertools.count(1) for t in ("membership", "sprint", "issue", "comment")}
    )
    in_progress: Counter[int] = field(default_factory=Counter)

    def next_id(self, table: str) -> int:
        return next(self.ids[table])


@env.seeder
def seed(db: Session, rng: random.Random) -> None:
    """Six projects (one archived), 40 users, and their memberships, sprints, issues and comments."""
    state = SeedState(make_users(rng))
    db.add_all(state.users)
    for project_id, spec in enumerate(PROJECTS, start=1):
        members = make_memberships(rng, state, project_id, spec.created_on)
        project = Project(
            id=project_id,
            key=spec.key,
            name=spec.name,
            description=spec.description,
            lead_id=members[0].user_id,
            status=spec.status,
            created_on=spec.created_on,
        )
        sprints = make_sprints(rng, state, project, spec)
        issues = make_issues(rng, state, project, spec, members, sprints)
        db.add_all([project, *members, *sprints, *issues, *make_comments(rng, state, issues, members)])
        db.flush()


def make_users(rng: random.Random) -> list[User]:
    """Forty users with unique names; three of them have left the company (inactive)."""
    names = rng.sample([(f, last) for f in FIRST_NAMES for last in LAST_NAMES], 40)
    inactive = set(rng.sample(range(1, 41), 3))
    return [
        User(
            id=i,
            name=f"{first} {last}",
            email=f"{first}.{last}@acme.dev".lower().replace("'", ""),
            job_title=rng.choice(JOB_TITLES),
            city=rng.choice(CITIES),
            active=i not in inactive,
        )
        for i, (first, last) in enumerate(names, start=1)
    ]


def make_memberships(
    rng: random.Random, state: SeedState, project_id: int, created_on: date
) -> list[Membership]:
    """Ten to twelve members: an active lead and a second maintainer, developers, a reporter and a viewer."""
    lead = rng.choice([u for u in state.users if u.active])
    others = rng.sample([u for u in state.users if u is not lead], rng.randint(9, 11))
    roles = ["maintainer", "maintainer"] + ["developer"] * (len(others) - 3) + ["reporter", "viewer"]
    members = []
    for i, (user, role) in enumerate(zip([lead, *others], roles, strict=True)):
        joined = created_on + timedelta(days=0 if i == 0 else rng.randint(0, 150))
        members.append(
            Membership(
                id=state.next_id("membership"),
                project_id=project_id,
                user_id=user.id,
                role=role,
                joined_on=joined,
            )
        )
    return members


def make_sprints(rng: random.Random, state: SeedState, project: Project, spec: ProjectSpec) -> list[Sprint]:
    """Two closed sprints, then (for active projects) the current sprint and a planned one."""
    if project.status == "archived":
        first_start, statuses = date(2025, 10, 6), ["closed", "closed"]
    else:
        current_start = TODAY - timedelta(days=rng.randint(2, 11))
        first_start = current_start - timedelta(days=2 * SPRINT_DAYS)
        statuses = ["closed", "closed", "active", "planned"]
    number = rng.randint(8, 30)
    return [
        Sprint(
            id=state.next_id("sprint"),
            project_id=project.id,
            name=f"{spec.key} Sprint {number + i}",
            goal=rng.choice([*SPRINT_GOALS, f"Progress on {rng.choice(spec.epics)}"]),
            start_date=first_start + timedelta(days=i * SPRINT_DAYS),
            end_date=first_start + timedelta(days=i * SPRINT_DAYS + SPRINT_DAYS - 1),
            capacity_points=rng.choice([26, 30, 34, 40]),
            status=status,
        )
        for i, status in enumerate(statuses)
    ]


def make_issues(
    rng: random.Random,
    state: SeedState,
    project: Project,
    spec: ProjectSpec,
    members: list[Membership],
    sprints: list[Sprint],
) -> list[Issue]:
    """Epics plus 27 (archived: 10) stories, tasks and bugs spread over the sprints and the backlog."""
    archived = project.status == "archived"
    reporters = [m.user_id for m in members if m.role != "viewer"]
    epics = [
        Issue(
            project_id=project.id,
            title=title,
            description=DESCRIPTIONS["epic"],
            type="epic",
            priority=rng.choice(["medium", "high"]),
            status="open",
            reporter_id=members[0].user_id,
            created_on=project.created_on + timedelta(days=rng.randint(1, 10)),
            due_date=project.created_on + timedelta(days=rng.randint(400, 560)),
        )
        for title in spec.epics
    ]
    committed = Counter[int]()
    parent_odds = {"story": 0.5, "task": 0.5, "bug": 0.2}
    work = []
    titles: set[str] = set()
    for _ in range(10 if archived else 27):
        kind = rng.choices(["story", "task", "bug"], weights=[4, 3, 3])[0]
        title = unique_title(rng, kind, spec.components, titles)
        points = rng.choices(POINTS, weights=POINT_WEIGHTS)[0]
        sprint = rng.choices([*sprints, None], weights=[*(PLANNING_WEIGHTS[s.status] for s in sprints), 3])[0]
        if sprint is not None and committed[sprint.id] + points > sprint.capacity_points:
            sprint = None
        if sprint is not None:
            committed[sprint.id] += points
        elif not archived and rng.random() < 0.3:
            points = None
        # The first epic is a finished milestone: only work of closed sprints is nested under it.
        milestone_done = sprint is not None and sprint.status == "closed"
        issue = Issue(
            project_id=project.id,
            title=title,
            description=DESCRIPTIONS[kind],
            type=kind,
            priority=rng.choices(["lowest", "low", "medium", "high", "critical"], weights=[1, 3, 5, 3, 1])[0],
            status="open",
            reporter_id=rng.choice(reporters),
            sprint_id=sprint.id if sprint else None,
            story_points=points,
            parent=rng.choice(epics if milestone_done else epics[1:])
            if rng.random() < parent_odds[kind]
            else None,
        )
        schedule(rng, issue, sprint, archived)
        staff(rng, state, issue, members)
        work.append(issue)
    for epic in epics:
        settle_epic(rng, state, epic, members)
    issues = sorted([*epics, *work], key=lambda i: i.created_on)
    for number, issue in enumerate(issues, start=1):
        issue.id, issue.key = state.next_id("issue"), f"{spec.key}-{number}"
    return issues


def unique_title(rng: random.Random, kind: str, components: tuple[str, ...], used: set[str]) -> str:
    """A title from the templates of ``kind`` not used yet in the project (suffixed if all are taken)."""
    for _ in range(20):
        template = rng.choice(TITLE_TEMPLATES[kind])
        title = template.format(c=rng.choice(components))
        title = title[0].upper() + title[1:]
        if title not in used:
            used.add(title)
            return title
    return f"{title} ({len(used)})"


def schedule(rng: random.Random, issue: Issue, sprint: Sprint | None, archived: bool) -> None:
    """Pick a status and creation, due and resolution dates consistent with the issue's sprint."""
    if sprint is None:
        issue.created_on = (date(2025, 11, 1) if archived else TODAY) - timedelta(days=rng.randint(5, 90))
        issue.status = (
            "done" if archived else rng.choices(["open", "in_progress", "done"], weights=[16, 1, 3])[0]
        )
        done_window = (issue.created_on + timedelta(days=1), issue.created_on + timedelta(days=4))
    elif sprint.status == "closed":
        issue.created_on = sprint.start_date - timedelta(days=rng.randint(1, 40))
        issue.status = "done"
        done_window = (sprint.start_date, sprint.end_date)
    else:
        issue.created_on = min(sprint.start_date, TODAY) - timedelta(days=rng.randint(1, 30))
        issue.status = rng.choices(*ACTIVE_SPRINT_STATUSES)[0] if sprint.status == "active" else "open"
        done_window = (sprint.start_date, TODAY - timedelta(days=1))
    if issue.status == "done":
        issue.resolved_on = done_window[0] + timedelta(
            days=rng.randint(0, (done_window[1] - done_window[0]).days)
        )
    if rng.random() < 0.35:
        issue.due_date = issue.created_on + timedelta(days=rng.randint(7, 60))


def staff(rng: random.Random, state: SeedState, issue: Issue, members: list[Membership]) -> None:
    """Assign work: issues past ``open`` always have an assignee; nobody exceeds the in-progress limit."""
    if issue.status == "open" and rng.random() < 0.4:
        return
    assignee = pick_assignee(rng, state, members, issue.status)
    if assignee is None:
        issue.status = "review"
        assignee = pick_assignee(rng, state, members, issue.status)
    issue.assignee_id = assignee


def pick_assignee(rng: random.Random, state: SeedState, members: list[Membership], status: str) -> int | None:
    """A maintainer or developer able to take work of ``status`` (inactive users only on done work)."""
    active = {u.id for u in state.users if u.active}
    candidates = [
        m.user_id
        for m in members
        if m.role in ASSIGNABLE_ROLES
        and (status == "done" or m.user_id in active)
        and (status != "in_progress" or state.in_progress[m.user_id] < MAX_IN_PROGRESS_PER_USER)
    ]
    if not candidates:
        return None
    chosen = rng.choice(candidates)
    if status == "in_progress":
        state.in_progress[chosen] += 1
    return chosen


def settle_epic(rng: random.Random, state: SeedState, epic: Issue, members: list[Membership]) -> None:
    """An epic is done when all its children are, in progress while some are being worked on, else open."""
    children = epic.children
    if children and all(c.status == "done" for c in children):
        epic.status, epic.resolved_on = "done", max(c.resolved_on for c in children if c.resolved_on)
        epic.assignee_id = pick_assignee(rng, state, members, "done")
    elif any(c.status != "open" for c in children):
        epic.assignee_id = pick_assignee(rng, state, members, "in_progress")
        epic.status = "in_progress" if epic.assignee_id else "open"


def make_comments(
    rng: random.Random, state: SeedState, issues: list[Issue], members: list[Membership]
) -> list[Comment]:
    """Zero to four comments per issue by project members, dated between creation and resolution."""
    comments = []
    for issue in issues:
        end = issue.resolved_on or TODAY
        span = max((end - issue.created_on).days, 0)
        count = rng.choices(range(5), weights=[3, 4, 3, 2, 1])[0]
        for offset in sorted(rng.randint(0, span) for _ in range(count)):
            comments.append(
                Comment(
                    id=state.next_id("comment"),
                    issue_id=issue.id,
                    author_id=rng.choice(members).user_id,
                    body=rng.choice(COMMENTS),
                    created_on=issue.created_on + timedelta(days=offset),
                )
            )
    return comments
