"""Calendar tools: look up people and rooms, search meetings, find free time, book and manage meetings.

Every time argument and ``*_utc`` field is UTC; ``*_local`` fields are in the local time of the office
where the meeting takes place (its room's office, or the organizer's office for online meetings).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Annotated, Any, TypeVar

from pydantic import Field
from sqlalchemy import or_, select
from sqlalchemy.orm import Session, joinedload, selectinload
from sqlalchemy.orm.interfaces import ORMOption

from environments.sdk import NotFound, ValidationFailed, orm_to_dict

from . import env
from .models import (
    NOW,
    WORK_END,
    WORK_START,
    Attendee,
    Base,
    Department,
    Equipment,
    Meeting,
    MeetingStatus,
    Office,
    Person,
    Response,
    Room,
)
from .rules import (
    check_capacity,
    check_room_bookable,
    check_time_window,
    editable_meeting,
    from_local,
    get_or_raise,
    load_invitees,
    overlapping,
    require_active,
    require_open,
    require_room_open,
    to_local,
    to_utc,
)

Limit = Annotated[int, Field(ge=1, le=100)]
PersonIds = Annotated[list[int], Field(min_length=1, max_length=20)]
Title = Annotated[str, Field(min_length=3, max_length=120)]
MAX_REPORT_DAYS = 92
UPCOMING_BOOKINGS = 10


# Loader options fetching, with a query for meetings, what ``_meeting_dict`` reads (attendee names apart).
_MEETING_LOAD = (
    joinedload(Meeting.organizer).joinedload(Person.office),
    joinedload(Meeting.room).joinedload(Room.office),
    selectinload(Meeting.attendees),
)
# The same for ``get_meeting``, attendee names included.
_MEETING_DETAIL_LOAD = (*_MEETING_LOAD, selectinload(Meeting.attendees).joinedload(Attendee.person))
# A room with its office, and its meetings with what ``_meeting_dict`` reads besides that room.
_ROOM_LOAD = (joinedload(Room.office),)
_ROOM_MEETING_LOAD = (joinedload(Meeting.organizer), selectinload(Meeting.attendees))

M = TypeVar("M", bound=Base)


def _load_or_raise(db: Session, model: type[M], key: int, label: str, options: Sequence[ORMOption]) -> M:
    """``get_or_raise`` with loader options, in one lookup."""
    row = db.get(model, key, options=options)
    if row is None:
        raise NotFound(f"no {label} with id {key!r}")
    return row


def _person_dict(person: Person) -> dict[str, Any]:
    return {**orm_to_dict(person), "city": person.office.city, "timezone": person.office.timezone}


def _room_dict(room: Room) -> dict[str, Any]:
    return {
        **orm_to_dict(room),
        "equipment": room.equipment.split(",") if room.equipment else [],
        "city": room.office.city,
        "timezone": room.office.timezone,
    }


def _window_dict(start: datetime, end: datetime, office: Office) -> dict[str, Any]:
    return {
        "start_utc": start,
        "end_utc": end,
        "start_local": to_local(start, office).isoformat(timespec="minutes"),
        "end_local": to_local(end, office).isoformat(timespec="minutes"),
        "timezone": office.timezone,
    }


def _meeting_dict(meeting: Meeting, *, with_attendees: bool = False) -> dict[str, Any]:
    result = {
        **orm_to_dict(meeting),
        **_window_dict(meeting.start_utc, meeting.end_utc, meeting.office),
        "office_id": meeting.office.id,
        "organizer_name": meeting.organizer.name,
        "room_name": meeting.room.name if meeting.room is not None else None,
        "duration_minutes": (meeting.end_utc - meeting.start_utc) // timedelta(minutes=1),
        "invitee_count": len(meeting.attendees),
    }
    if with_attendees:
        result["attendees"] = [
            {
                "person_id": a.person_id,
                "name": a.person.name,
                "email": a.person.email,
                "response": a.response,
                "responded_utc": a.responded_utc,
            }
            for a in meeting.attendees
        ]
    return result


@env.tool
def get_person(db: Session, person_id: int) -> dict:
    """Get a person's profile: e-mail, job title, department, office, time zone and whether still employed.

    Args:
        person_id: The person's id.
    """
    return _person_dict(get_or_raise(db, Person, person_id, "person"))


@env.tool
def search_people(
    db: Session,
    name: str | None = None,
    department: Department | None = None,
    office_id: str | None = None,
    include_inactive: bool = False,
    limit: Limit = 20,
) -> list[dict]:
    """Search the company directory, ordered by name.

    Args:
        name: Case-insensitive part of the person's name or e-mail address.
        department: Only people in this department.
        office_id: Only people based in this office (LON, BER, NYC, SFO, SIN or BLR).
        include_inactive: Also list people who have left the company.
        limit: Maximum number of people returned.
    """
    query = select(Person).options(joinedload(Person.office)).order_by(Person.name, Person.id).limit(limit)
    if name:
        query = query.where(or_(Person.name.ilike(f"%{name}%"), Person.email.ilike(f"%{name}%")))
    if department is not None:
        query = query.where(Person.department == department)
    if office_id is not None:
        get_or_raise(db, Office, office_id, "office")
        query = query.where(Person.office_id == office_id)
    if not include_inactive:
        query = query.where(Person.active.is_(True))
    return [_person_dict(p) for p in db.scalars(query)]


@env.tool
def get_room(db: Session, room_id: int) -> dict:
    """Get a meeting room (office, floor, capacity, equipment, status) with its next upcoming bookings.

    Args:
        room_id: The room's id.
    """
    room = _load_or_raise(db, Room, room_id, "room", _ROOM_LOAD)
    upcoming = db.scalars(
        select(Meeting)
        .options(*_ROOM_MEETING_LOAD)
        .where(Meeting.room_id == room_id, Meeting.status == "scheduled", Meeting.end_utc > NOW)
        .order_by(Meeting.start_utc)
        .limit(UPCOMING_BOOKINGS)
    )
    return {**_room_dict(room), "upcoming_meetings": [_meeting_dict(m) for m in upcoming]}


@env.tool
def search_rooms(
    db: Session,
    office_id: str | None = None,
    min_capacity: Annotated[int, Field(ge=1)] | None = None,
    equipment: list[Equipment] | None = None,
    free_from_utc: datetime | None = None,
    free_until_utc: datetime | None = None,
    include_closed: bool = False,
    limit: Limit = 20,
) -> list[dict]:
    """Search meeting rooms, smallest first; optionally only rooms free for a whole time window.

    Args:
        office_id: Only rooms in this office (LON, BER, NYC, SFO, SIN or BLR).
        min_capacity: Only rooms seating at least this many people.
        equipment: Only rooms that have all of these items.
        free_from_utc: Start of the window the room must be free for (UTC); needs free_until_utc.
        free_until_utc: End of the window the room must be free for (UTC); needs free_from_utc.
        include_closed: Also list rooms closed for maintenance.
        limit: Maximum number of rooms returned.
    """
    query = select(Room).options(selectinload(Room.office)).order_by(Room.capacity, Room.office_id, Room.name)
    if office_id is not None:
        get_or_raise(db, Office, office_id, "office")
        query = query.where(Room.office_id == office_id)
    if min_capacity is not None:
        query = query.where(Room.capacity >= min_capacity)
    if not include_closed:
        query = query.where(Room.status == "active")
    busy: set[int | None] = set()
    if free_from_utc is not None or free_until_utc is not None:
        if free_from_utc is None or free_until_utc is None:
            raise ValidationFailed("free_from_utc and free_until_utc must be given together")
        start, end = to_utc(free_from_utc), to_utc(free_until_utc)
        if end <= start:
            raise ValidationFailed(
                f"free_until_utc {end.isoformat()} must be after free_from_utc {start.isoformat()}"
            )
        busy = {m.room_id for m in db.scalars(overlapping(start, end))}
    wanted = set(equipment or ())
    rooms = [r for r in db.scalars(query) if r.id not in busy and wanted <= set(r.equipment.split(","))]
    return [_room_dict(r) for r in rooms[:limit]]


@env.tool
def get_meeting(db: Session, meeting_id: int) -> dict:
    """Get a meeting with its organizer, room, UTC and local times, status and every invitee's response.

    Args:
        meeting_id: The meeting's id.
    """
    meeting = _load_or_raise(db, Meeting, meeting_id, "meeting", _MEETING_DETAIL_LOAD)
    return _meeting_dict(meeting, with_attendees=True)


@env.tool
def list_meetings(
    db: Session,
    person_id: int | None = None,
    room_id: int | None = None,
    status: MeetingStatus | None = None,
    start_from_utc: datetime | None = None,
    start_before_utc: datetime | None = None,
    title_contains: str | None = None,
    limit: Limit = 20,
) -> list[dict]:
    """Search meetings, earliest first.

    Args:
        person_id: Only meetings this person organises or is invited to.
        room_id: Only meetings booked in this room.
        status: Only meetings with this status.
        start_from_utc: Only meetings starting at or after this time (UTC).
        start_before_utc: Only meetings starting before this time (UTC).
        title_contains: Case-insensitive part of the meeting title.
        limit: Maximum number of meetings returned.
    """
    query = select(Meeting).options(*_MEETING_LOAD).order_by(Meeting.start_utc, Meeting.id).limit(limit)
    if person_id is not None:
        get_or_raise(db, Person, person_id, "person")
        invited = select(Attendee.meeting_id).where(Attendee.person_id == person_id)
        query = query.where(or_(Meeting.organizer_id == person_id, Meeting.id.in_(invited)))
    if room_id is not None:
        get_or_raise(db, Room, room_id, "room")
        query = query.where(Meeting.room_id == room_id)
    if status is not None:
        query = query.where(Meeting.status == status)
    if start_from_utc is not None:
        query = query.where(Meeting.start_utc >= to_utc(start_from_utc))
    if start_before_utc is not None:
        query = query.where(Meeting.start_utc < to_utc(start_before_utc))
    if title_contains:
        query = query.where(Meeting.title.ilike(f"%{title_contains}%"))
    return [_meeting_dict(m) for m in db.scalars(query)]


@env.tool
def find_free_slots(
    db: Session,
    person_ids: PersonIds,
    day: date,
    duration_minutes: Annotated[int, Field(ge=15, le=660, multiple_of=15)],
    room_id: int | None = None,
    office_id: str | None = None,
) -> list[dict]:
    """Find the windows on one working day when all the given people (and optionally a room) are free.

    A person is busy during scheduled meetings they organise or are invited to and have not declined.
    Windows lie within 08:00-19:00 local time of the office, after the current time, and are at least
    duration_minutes long; a meeting may start anywhere in a window as long as it ends by the window's end.

    Args:
        person_ids: The people who must all be free.
        day: The local calendar day (YYYY-MM-DD) of the office, Monday to Friday.
        duration_minutes: Length of the meeting to fit, a multiple of 15.
        room_id: A room that must also be free; its office's working hours then apply.
        office_id: Office whose working hours apply; defaults to the room's office, else the first person's.
    """
    people = [get_or_raise(db, Person, pid, "person") for pid in person_ids]
    for person in people:
        require_active(person)
    room = get_or_raise(db, Room, room_id, "room") if room_id is not None else None
    office = get_or_raise(db, Office, office_id, "office") if office_id is not None else None
    if room is not None:
        if office is not None and office.id != room.office_id:
            raise ValidationFailed(
                f"room {room.id} ({room.name}) is in office {room.office_id}, not {office.id}"
            )
        require_room_open(room)
        check_capacity(room, len(people))
    office = office or (room.office if room is not None else people[0].office)
    if day.weekday() >= 5:
        raise ValidationFailed(f"{day.isoformat()} is a weekend; meetings take place Monday to Friday")
    window_end = from_local(datetime.combine(day, WORK_END), office)
    cursor = max(from_local(datetime.combine(day, WORK_START), office), NOW)
    invited = select(Attendee.meeting_id).where(
        Attendee.person_id.in_(person_ids), Attendee.response != "declined"
    )
    involved = [Meeting.organizer_id.in_(person_ids), Meeting.id.in_(invited)]
    if room is not None:
        involved.append(Meeting.room_id == room.id)
    busy = db.scalars(overlapping(cursor, window_end).where(or_(*involved)).order_by(Meeting.start_utc))
    needed = timedelta(minutes=duration_minutes)
    slots = []
    for meeting in busy:
        if meeting.start_utc - cursor >= needed:
            slots.append(_window_dict(cursor, meeting.start_utc, office))
        cursor = max(cursor, meeting.end_utc)
    if window_end - cursor >= needed:
        slots.append(_window_dict(cursor, window_end, office))
    return slots


@env.tool
def room_utilization_report(
    db: Session, start_date: date, end_date: date, office_id: str | None = None
) -> dict:
    """Report per room how many scheduled meetings it hosts between two dates and the share of its working
    hours (08:00-19:00, Monday to Friday) they fill, busiest rooms first.

    Args:
        start_date: First day of the period (inclusive), as a local date of each room's office.
        end_date: Last day of the period (inclusive), at most 92 days after start_date.
        office_id: Only rooms of this office.
    """
    if end_date < start_date:
        raise ValidationFailed(
            f"end_date {end_date.isoformat()} is before start_date {start_date.isoformat()}"
        )
    if (end_date - start_date).days >= MAX_REPORT_DAYS:
        raise ValidationFailed(f"the report period may span at most {MAX_REPORT_DAYS} days")
    rooms_query = select(Room).order_by(Room.id)
    if office_id is not None:
        get_or_raise(db, Office, office_id, "office")
        rooms_query = rooms_query.where(Room.office_id == office_id)
    days = [start_date + timedelta(days=i) for i in range((end_date - start_date).days + 1)]
    working_days = sum(d.weekday() < 5 for d in days)
    in_period: dict[int, list[Meeting]] = defaultdict(list)
    scheduled = (
        select(Meeting)
        .options(selectinload(Meeting.room).selectinload(Room.office))
        .where(Meeting.status == "scheduled", Meeting.room_id.is_not(None))
    )
    for meeting in db.scalars(scheduled):
        if start_date <= to_local(meeting.start_utc, meeting.office).date() <= end_date:
            in_period[meeting.room_id].append(meeting)
    available = working_days * (WORK_END.hour - WORK_START.hour)
    rows = []
    for room in db.scalars(rooms_query):
        meetings = in_period[room.id]
        booked = sum((m.end_utc - m.start_utc for m in meetings), timedelta()) / timedelta(hours=1)
        rows.append(
            {
                "room_id": room.id,
                "room_name": room.name,
                "office_id": room.office_id,
                "capacity": room.capacity,
                "status": room.status,
                "meetings": len(meetings),
                "booked_hours": round(booked, 2),
                "utilization_pct": round(100 * booked / available, 1) if available else 0.0,
            }
        )
    rows.sort(key=lambda r: (-r["utilization_pct"], r["room_id"]))
    return {
        "start_date": start_date,
        "end_date": end_date,
        "working_days": working_days,
        "total_meetings": sum(r["meetings"] for r in rows),
        "total_booked_hours": round(sum(r["booked_hours"] for r in rows), 2),
        "rooms": rows,
    }


@env.tool(mutates=True)
def schedule_meeting(
    db: Session,
    organizer_id: int,
    title: Title,
    start_utc: datetime,
    end_utc: datetime,
    attendee_ids: list[int] | None = None,
    room_id: int | None = None,
    description: str | None = None,
) -> dict:
    """Schedule a meeting in a room, or online when no room is given; invitations start as pending.

    The meeting must start in the future on a 15-minute boundary, end after it starts and fit within
    08:00-19:00 local time on a weekday. A room must be open, free for the whole slot and seat the
    organizer plus every invitee. Only current employees can organise or be invited.

    Args:
        organizer_id: The person organising the meeting (they attend implicitly).
        title: Short meeting title.
        start_utc: Start time (UTC).
        end_utc: End time (UTC).
        attendee_ids: People to invite, not including the organizer.
        room_id: Room to book; omit for an online meeting.
        description: Optional agenda or notes.
    """
    organizer = get_or_raise(db, Person, organizer_id, "person")
    require_active(organizer)
    room = get_or_raise(db, Room, room_id, "room") if room_id is not None else None
    invitees = load_invitees(db, attendee_ids or [], None, organizer_id)
    start, end = to_utc(start_utc), to_utc(end_utc)
    check_time_window(start, end, room.office if room is not None else organizer.office)
    if room is not None:
        check_room_bookable(db, room, start, end, 1 + len(invitees))
    meeting = Meeting(
        title=title,
        description=description,
        organizer=organizer,
        room=room,
        start_utc=start,
        end_utc=end,
        status="scheduled",
        created_utc=NOW,
        attendees=[Attendee(person=p, response="pending") for p in invitees],
    )
    db.add(meeting)
    db.flush()
    return _meeting_dict(meeting, with_attendees=True)


@env.tool(mutates=True)
def reschedule_meeting(
    db: Session,
    meeting_id: int,
    requested_by: int,
    new_start_utc: datetime,
    new_end_utc: datetime,
    new_room_id: int | None = None,
) -> dict:
    """Move a meeting that has not started to a new time and optionally another room; only its organizer
    may. The same time and room rules as schedule_meeting apply, and every invitee's response is reset to
    pending.

    Args:
        meeting_id: The meeting to move.
        requested_by: The person asking for the change (must be the organizer).
        new_start_utc: New start time (UTC).
        new_end_utc: New end time (UTC).
        new_room_id: Room to move to; omit to keep the current room (or to stay online).
    """
    meeting = editable_meeting(db, meeting_id, requested_by)
    room = get_or_raise(db, Room, new_room_id, "room") if new_room_id is not None else meeting.room
    start, end = to_utc(new_start_utc), to_utc(new_end_utc)
    check_time_window(start, end, room.office if room is not None else meeting.organizer.office)
    if room is not None:
        check_room_bookable(db, room, start, end, 1 + len(meeting.attendees), exclude_meeting=meeting.id)
    meeting.room, meeting.start_utc, meeting.end_utc = room, start, end
    for attendee in meeting.attendees:
        attendee.response, attendee.responded_utc = "pending", None
    db.flush()
    return _meeting_dict(meeting, with_attendees=True)


@env.tool(mutates=True)
def cancel_meeting(db: Session, meeting_id: int, requested_by: int, reason: str | None = None) -> dict:
    """Cancel a meeting that has not started yet, freeing its room; only its organizer may.

    Args:
        meeting_id: The meeting to cancel.
        requested_by: The person asking for the cancellation (must be the organizer).
        reason: Optional reason shown to the invitees.
    """
    meeting = editable_meeting(db, meeting_id, requested_by)
    meeting.status, meeting.cancel_reason = "cancelled", reason
    db.flush()
    return _meeting_dict(meeting)


@env.tool(mutates=True)
def invite_attendees(db: Session, meeting_id: int, requested_by: int, person_ids: PersonIds) -> dict:
    """Invite more people to a meeting that has not started; only its organizer may, and the room (if any)
    must still seat everyone.

    Args:
        meeting_id: The meeting.
        requested_by: The person asking (must be the organizer).
        person_ids: Current employees to invite who are not invited yet.
    """
    meeting = editable_meeting(db, meeting_id, requested_by)
    invitees = load_invitees(db, person_ids, meeting, meeting.organizer_id)
    if meeting.room is not None:
        check_capacity(meeting.room, 1 + len(meeting.attendees) + len(invitees))
    meeting.attendees.extend(Attendee(person=p, response="pending") for p in invitees)
    db.flush()
    return _meeting_dict(meeting, with_attendees=True)


@env.tool(mutates=True)
def respond_to_invitation(db: Session, meeting_id: int, person_id: int, response: Response) -> dict:
    """Record an invitee's answer to an invitation to a meeting that has not started yet.

    Args:
        meeting_id: The meeting.
        person_id: The invited person answering.
        response: Their answer.
    """
    meeting = get_or_raise(db, Meeting, meeting_id, "meeting")
    person = get_or_raise(db, Person, person_id, "person")
    invitation = db.get(Attendee, (meeting_id, person_id))
    if invitation is None:
        raise NotFound(f"person {person_id} ({person.name}) has no invitation to meeting {meeting_id}")
    require_open(meeting)
    invitation.response, invitation.responded_utc = response, NOW
    return {**orm_to_dict(invitation), "meeting": _meeting_dict(meeting)}
