"""Deterministic seed data for the calendar environment (uses only the seeder's ``rng``)."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta

from sqlalchemy.orm import Session

from . import env
from .models import NOW, WORK_END, WORK_START, Attendee, Meeting, Office, Person, Room

OFFICES = [
    ("LON", "London", "United Kingdom", "Europe/London", 60, "22 Bishopsgate, London EC2N 4BQ"),
    ("BER", "Berlin", "Germany", "Europe/Berlin", 120, "Friedrichstrasse 68, 10117 Berlin"),
    ("NYC", "New York", "United States", "America/New_York", -240, "250 Park Ave S, New York, NY 10003"),
    ("SFO", "San Francisco", "United States", "America/Los_Angeles", -420, "535 Mission St, San Francisco"),
    ("SIN", "Singapore", "Singapore", "Asia/Singapore", 480, "8 Marina View, Singapore 018960"),
    ("BLR", "Bangalore", "India", "Asia/Kolkata", 330, "Embassy Golf Links, Bengaluru 560071"),
]
ROOM_NAMES = {
    "LON": ["Thames", "Hyde Park", "Camden", "Soho", "Greenwich"],
    "BER": ["Spree", "Tiergarten", "Kreuzberg", "Mitte", "Wannsee"],
    "NYC": ["Hudson", "Brooklyn", "Harlem", "Chelsea", "Tribeca"],
    "SFO": ["Presidio", "Sausalito", "Mission", "Nob Hill", "Embarcadero"],
    "SIN": ["Sentosa", "Orchard", "Marina", "Raffles", "Changi"],
    "BLR": ["Cubbon", "Lalbagh", "Indiranagar", "Koramangala", "Whitefield"],
}
CAPACITIES = [2, 4, 4, 6, 6, 8, 10, 12, 16, 20]
EQUIPMENT_ODDS = {
    "display": 0.9,
    "projector": 0.35,
    "speakerphone": 0.5,
    "step_free_access": 0.6,
    "video_conferencing": 0.7,
    "whiteboard": 0.7,
}
FIRST_NAMES = [
    "Olivia",
    "Liam",
    "Amara",
    "Mateo",
    "Priya",
    "Noah",
    "Sofia",
    "Kenji",
    "Chloe",
    "Arjun",
    "Hannah",
    "Lukas",
    "Zara",
    "Ethan",
    "Mei",
    "Jonas",
    "Isabella",
    "Ravi",
    "Fatima",
    "Daniel",
    "Aisha",
    "Leon",
    "Grace",
    "Tomas",
    "Ananya",
    "Felix",
    "Nadia",
    "Samuel",
    "Yuki",
    "Clara",
    "Omar",
    "Emma",
    "Wei",
    "Lena",
    "Diego",
    "Sara",
]
LAST_NAMES = [
    "Smith",
    "Patel",
    "Müller",
    "Garcia",
    "Chen",
    "Okafor",
    "Schmidt",
    "Nguyen",
    "Kowalski",
    "Rossi",
    "Tanaka",
    "Johnson",
    "Fischer",
    "Iyer",
    "Lopez",
    "Williams",
    "Kim",
    "Becker",
    "Sharma",
    "Brown",
    "Novak",
    "Hassan",
    "Lim",
    "Dubois",
    "Andersson",
    "Reddy",
    "Weber",
    "Martin",
    "Wong",
    "Oliveira",
]
JOB_TITLES = {
    "Engineering": ["Software Engineer", "Senior Software Engineer", "Staff Engineer", "Engineering Manager"],
    "Product": ["Product Manager", "Senior Product Manager", "Director of Product"],
    "Design": ["Product Designer", "UX Researcher", "Design Lead"],
    "Sales": ["Account Executive", "Sales Development Rep", "Regional Sales Director"],
    "Marketing": ["Marketing Manager", "Content Strategist", "Growth Analyst"],
    "Finance": ["Financial Analyst", "Controller", "Head of Finance"],
    "People": ["Recruiter", "People Partner", "Head of People"],
    "Legal": ["Legal Counsel", "Paralegal"],
    "Support": ["Support Specialist", "Support Team Lead", "Customer Success Manager"],
}
DEPARTMENT_WEIGHTS = [30, 10, 8, 14, 9, 8, 7, 4, 10]
PROJECTS = ["Atlas", "Nimbus", "Orion", "Falcon", "Aurora", "Helix", "Polaris"]
CUSTOMERS = ["Acme Corp", "Globex", "Initech", "Umbrella Health", "Stark Logistics", "Wayne Retail", "Hooli"]
TITLES = {
    "Engineering": ["Sprint planning {p}", "Architecture review: {p}", "Incident postmortem", "Standup {p}"],
    "Product": ["Roadmap planning {p}", "Feature prioritisation", "Product review: {p}"],
    "Design": ["Design critique: {p}", "User research readout", "Design system sync"],
    "Sales": ["Customer call: {c}", "Pipeline review", "Deal desk: {c}"],
    "Marketing": ["Campaign kickoff: {p}", "Content calendar sync", "Launch plan: {p}"],
    "Finance": ["Budget review Q3", "Month-end close", "Forecast sync"],
    "People": ["Hiring debrief", "Onboarding session", "Interview loop: {p} team"],
    "Legal": ["Contract review: {c}", "Privacy compliance check"],
    "Support": ["Escalation review: {c}", "Support weekly", "Customer QBR: {c}"],
}
DESCRIPTIONS = [
    "Agenda is in the shared drive.",
    "Please come prepared with your updates.",
    "Bring laptops; we will work through the open items.",
    "Notes from last time are linked in the invite.",
    "Recording will be shared afterwards.",
]
CANCEL_REASONS = ["Organizer out sick", "Superseded by all-hands", "No longer needed", "Customer rescheduled"]
DURATIONS = [30, 30, 45, 60, 60, 60, 90, 120]
FIRST_DAY, LAST_DAY = date(2026, 5, 18), date(2026, 7, 24)
PEOPLE_PER_OFFICE, MEETING_COUNT = 12, 140
WORKDAY_MINUTES = (WORK_END.hour - WORK_START.hour) * 60


def _people(rng: random.Random, offices: list[Office]) -> list[Person]:
    names: set[str] = set()
    people: list[Person] = []
    departments = list(JOB_TITLES)
    for office in offices:
        for _ in range(PEOPLE_PER_OFFICE):
            name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
            while name in names:
                name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
            names.add(name)
            department = rng.choices(departments, DEPARTMENT_WEIGHTS)[0]
            email = name.lower().replace(" ", ".").replace("ü", "ue") + "@northwind.example"
            people.append(
                Person(
                    id=len(people) + 1,
                    name=name,
                    email=email,
                    job_title=rng.choice(JOB_TITLES[department]),
                    department=department,
                    office_id=office.id,
                    active=True,
                    office=office,
                )
            )
    for person in rng.sample(people, 4):
        person.active = False
    return people


def _rooms(rng: random.Random, offices: list[Office]) -> list[Room]:
    rooms: list[Room] = []
    for office in offices:
        for name in ROOM_NAMES[office.id]:
            capacity = rng.choice(CAPACITIES)
            equipment = [item for item, odds in EQUIPMENT_ODDS.items() if rng.random() < odds]
            rooms.append(
                Room(
                    id=len(rooms) + 1,
                    office_id=office.id,
                    name=name,
                    floor=rng.randint(1, 9),
                    capacity=capacity,
                    equipment=",".join(equipment),
                    status="active",
                    office=office,
                )
            )
    for room in rng.sample(rooms, 2):
        room.status = "maintenance"
    return rooms


def _meetings(rng: random.Random, people: list[Person], rooms: list[Room]) -> list[Meeting]:
    active = [p for p in people if p.active]
    days = [FIRST_DAY + timedelta(days=i) for i in range((LAST_DAY - FIRST_DAY).days + 1)]
    days = [d for d in days if d.weekday() < 5]
    meetings: list[Meeting] = []
    while len(meetings) < MEETING_COUNT:
        organizer = rng.choice(active)
        office_rooms = [r for r in rooms if r.office_id == organizer.office_id and r.status == "active"]
        room = rng.choice(office_rooms) if rng.random() < 0.85 else None
        duration = rng.choice(DURATIONS)
        day_start = datetime.combine(rng.choice(days), WORK_START)
        local_start = day_start + timedelta(minutes=30 * rng.randint(0, (WORKDAY_MINUTES - duration) // 30))
        start = local_start - timedelta(minutes=organizer.office.utc_offset_minutes)
        end = start + timedelta(minutes=duration)
        if room is not None and any(
            m.room_id == room.id and m.start_utc < end and m.end_utc > start for m in meetings
        ):
            continue
        max_invitees = room.capacity - 1 if room is not None else 8
        pool = [
            p
            for p in active
            if p is not organizer and (p.office_id == organizer.office_id or rng.random() < 0.1)
        ]
        invitees = rng.sample(pool, min(rng.randint(1, min(max_invitees, 8)), len(pool)))
        created = _minutes_before(rng, min(start, NOW), 21 * 24 * 60)
        cancelled = rng.random() < 0.08
        meeting = Meeting(
            id=len(meetings) + 1,
            title=rng.choice(TITLES[organizer.department]).format(
                p=rng.choice(PROJECTS), c=rng.choice(CUSTOMERS)
            ),
            description=rng.choice(DESCRIPTIONS) if rng.random() < 0.5 else None,
            organizer_id=organizer.id,
            room_id=room.id if room is not None else None,
            start_utc=start,
            end_utc=end,
            status="cancelled" if cancelled else "scheduled",
            cancel_reason=rng.choice(CANCEL_REASONS) if cancelled else None,
            created_utc=created,
        )
        meeting.attendees = [_invitation(rng, meeting, person) for person in invitees]
        meetings.append(meeting)
    return meetings


def _invitation(rng: random.Random, meeting: Meeting, person: Person) -> Attendee:
    weights = [0, 80, 10, 10] if meeting.start_utc < NOW else [35, 45, 10, 10]
    response = rng.choices(["pending", "accepted", "declined", "tentative"], weights)[0]
    responded = None
    if response != "pending":
        limit = min(meeting.start_utc, NOW)
        responded = _minutes_before(rng, limit, (limit - meeting.created_utc) // timedelta(minutes=1))
    return Attendee(person_id=person.id, response=response, responded_utc=responded)


def _minutes_before(rng: random.Random, limit: datetime, span_minutes: int) -> datetime:
    """A random whole minute strictly within the ``span_minutes`` before ``limit``."""
    return limit - timedelta(minutes=rng.randint(1, max(span_minutes - 1, 1)))


@env.seeder
def seed(db: Session, rng: random.Random) -> None:
    """Six offices, 30 rooms, 72 people and 140 meetings with their invitations."""
    offices = [
        Office(id=o[0], city=o[1], country=o[2], timezone=o[3], utc_offset_minutes=o[4], address=o[5])
        for o in OFFICES
    ]
    people = _people(rng, offices)
    rooms = _rooms(rng, offices)
    db.add_all([*offices, *rooms, *people, *_meetings(rng, people, rooms)])
