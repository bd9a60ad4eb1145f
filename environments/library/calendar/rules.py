"""Lookups and business rules shared by the calendar tools; each raises a typed SDK error."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from environments.sdk import (
    Conflict,
    Forbidden,
    LimitExceeded,
    PreconditionFailed,
    ValidationFailed,
)
from environments.sdk.helpers import get_or_raise

from .models import NOW, SLOT_MINUTES, WORK_END, WORK_START, Base, Meeting, Office, Person, Room

M = TypeVar("M", bound=Base)


def to_utc(value: datetime) -> datetime:
    """Normalise an argument to naive UTC (naive values are taken to be UTC already)."""
    return value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)


def to_local(value: datetime, office: Office) -> datetime:
    return value + timedelta(minutes=office.utc_offset_minutes)


def from_local(value: datetime, office: Office) -> datetime:
    return value - timedelta(minutes=office.utc_offset_minutes)


def require_active(person: Person) -> None:
    if not person.active:
        raise PreconditionFailed(f"person {person.id} ({person.name}) is no longer with the company")


def check_time_window(start: datetime, end: datetime, office: Office) -> None:
    """A meeting must start in the future, end after it starts, be aligned to 15 minutes and fit
    in one weekday's working hours (08:00-19:00) of the office where it takes place."""
    if end <= start:
        raise ValidationFailed(f"meeting end {end.isoformat()} must be after its start {start.isoformat()}")
    if start < NOW:
        raise ValidationFailed(
            f"meeting start {start.isoformat()} is in the past (now is {NOW.isoformat()} UTC)"
        )
    for moment in (start, end):
        if moment.second or moment.microsecond or moment.minute % SLOT_MINUTES:
            raise ValidationFailed(f"{moment.isoformat()} is not on a {SLOT_MINUTES}-minute boundary")
    local_start, local_end = to_local(start, office), to_local(end, office)
    day = local_start.date()
    if day.weekday() >= 5:
        raise ValidationFailed(f"{day.isoformat()} is a weekend in the {office.city} office")
    if local_start.time() < WORK_START or local_end > datetime.combine(day, WORK_END):
        raise ValidationFailed(
            f"meeting {local_start:%H:%M}-{local_end:%H:%M} local time is outside working hours "
            f"{WORK_START:%H:%M}-{WORK_END:%H:%M} of the {office.city} office ({office.timezone})"
        )


def check_room_bookable(
    db: Session,
    room: Room,
    start: datetime,
    end: datetime,
    headcount: int,
    exclude_meeting: int | None = None,
) -> None:
    """The room must be in service, hold everyone and be free for the whole slot."""
    require_room_open(room)
    check_capacity(room, headcount)
    query = overlapping(start, end).where(Meeting.room_id == room.id)
    if exclude_meeting is not None:
        query = query.where(Meeting.id != exclude_meeting)
    clash = db.scalars(query.order_by(Meeting.start_utc).limit(1)).first()
    if clash is not None:
        raise Conflict(
            f"room {room.id} ({room.name}) is already booked by meeting {clash.id} ({clash.title!r}) "
            f"from {clash.start_utc.isoformat()} to {clash.end_utc.isoformat()} UTC"
        )


def require_room_open(room: Room) -> None:
    if room.status != "active":
        raise PreconditionFailed(f"room {room.id} ({room.name}) is closed for {room.status}")


def check_capacity(room: Room, headcount: int) -> None:
    """Everyone invited, plus the organizer, must fit in the room."""
    if headcount > room.capacity:
        raise LimitExceeded(
            f"room {room.id} ({room.name}) seats {room.capacity} "
            f"but the meeting would have {headcount} people"
        )


def overlapping(start: datetime, end: datetime) -> Select[tuple[Meeting]]:
    """Scheduled meetings that overlap the half-open interval [start, end)."""
    return select(Meeting).where(
        Meeting.status == "scheduled", Meeting.start_utc < end, Meeting.end_utc > start
    )


def load_invitees(
    db: Session, person_ids: Iterable[int], meeting: Meeting | None, organizer_id: int
) -> list[Person]:
    """Resolve people to invite: each must exist, be active, not be the organizer or invited already."""
    ids = list(person_ids)
    if len(set(ids)) != len(ids):
        raise ValidationFailed(f"attendee ids contain duplicates: {ids}")
    if organizer_id in ids:
        raise ValidationFailed(
            f"person {organizer_id} is the organizer and attends implicitly; do not invite them"
        )
    invited = {a.person_id for a in meeting.attendees} if meeting is not None else set()
    people = []
    for person_id in ids:
        person = get_or_raise(db, Person, person_id, "person")
        require_active(person)
        if person_id in invited:
            raise Conflict(f"person {person_id} ({person.name}) is already invited to meeting {meeting.id}")
        people.append(person)
    return people


def editable_meeting(db: Session, meeting_id: int, requested_by: int) -> Meeting:
    """A meeting that ``requested_by`` may change: they organise it, and it is scheduled and not started."""
    meeting = get_or_raise(db, Meeting, meeting_id, "meeting")
    get_or_raise(db, Person, requested_by, "person")
    if meeting.organizer_id != requested_by:
        raise Forbidden(
            f"only the organizer of meeting {meeting_id} (person {meeting.organizer_id}) may change it, "
            f"not person {requested_by}"
        )
    require_open(meeting)
    return meeting


def require_open(meeting: Meeting) -> None:
    """The meeting must still be scheduled and not have started yet."""
    if meeting.status != "scheduled":
        raise PreconditionFailed(f"meeting {meeting.id} is {meeting.status}")
    if meeting.start_utc <= NOW:
        raise PreconditionFailed(
            f"meeting {meeting.id} already started at {meeting.start_utc.isoformat()} UTC"
        )
