"""Schema of the calendar environment: offices, rooms, people, meetings and their attendees.

All meeting times are stored as naive UTC datetimes; each office has a fixed UTC offset (the
simulated period is the northern summer of 2026, so offsets include daylight saving time).
"""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Literal

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NOW = datetime(2026, 6, 15, 9, 0)
TODAY: date = NOW.date()
WORK_START = time(8, 0)
WORK_END = time(19, 0)
SLOT_MINUTES = 15

Department = Literal[
    "Engineering", "Product", "Design", "Sales", "Marketing", "Finance", "People", "Legal", "Support"
]
Equipment = Literal[
    "projector", "video_conferencing", "whiteboard", "display", "speakerphone", "step_free_access"
]
Response = Literal["accepted", "declined", "tentative"]
MeetingStatus = Literal["scheduled", "cancelled"]


class Base(DeclarativeBase):
    pass


class Office(Base):
    __tablename__ = "offices"
    id: Mapped[str] = mapped_column(String(3), primary_key=True)
    city: Mapped[str] = mapped_column(String(60))
    country: Mapped[str] = mapped_column(String(60))
    timezone: Mapped[str] = mapped_column(String(40))
    utc_offset_minutes: Mapped[int]
    address: Mapped[str] = mapped_column(String(120))


class Room(Base):
    __tablename__ = "rooms"
    id: Mapped[int] = mapped_column(primary_key=True)
    office_id: Mapped[str] = mapped_column(ForeignKey("offices.id"))
    name: Mapped[str] = mapped_column(String(60))
    floor: Mapped[int]
    capacity: Mapped[int]
    equipment: Mapped[str] = mapped_column(String(200), doc="comma-separated Equipment values, sorted")
    status: Mapped[str] = mapped_column(String(20), default="active")
    office: Mapped[Office] = relationship()


class Person(Base):
    __tablename__ = "people"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(80))
    email: Mapped[str] = mapped_column(String(120), unique=True)
    job_title: Mapped[str] = mapped_column(String(80))
    department: Mapped[str] = mapped_column(String(40))
    office_id: Mapped[str] = mapped_column(ForeignKey("offices.id"))
    active: Mapped[bool] = mapped_column(default=True)
    office: Mapped[Office] = relationship()


class Meeting(Base):
    __tablename__ = "meetings"
    id: Mapped[int] = mapped_column(primary_key=True)
    title: Mapped[str] = mapped_column(String(120))
    description: Mapped[str | None] = mapped_column(Text)
    organizer_id: Mapped[int] = mapped_column(ForeignKey("people.id"))
    room_id: Mapped[int | None] = mapped_column(ForeignKey("rooms.id"))
    start_utc: Mapped[datetime] = mapped_column(index=True)
    end_utc: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(20), default="scheduled")
    cancel_reason: Mapped[str | None] = mapped_column(String(200))
    created_utc: Mapped[datetime]
    organizer: Mapped[Person] = relationship()
    room: Mapped[Room | None] = relationship()
    attendees: Mapped[list[Attendee]] = relationship(order_by="Attendee.person_id")

    @property
    def office(self) -> Office:
        """Where the meeting takes place: the room's office, or the organizer's for online meetings."""
        return self.room.office if self.room is not None else self.organizer.office


class Attendee(Base):
    """An invitation of a person (other than the organizer) to a meeting."""

    __tablename__ = "attendees"
    meeting_id: Mapped[int] = mapped_column(ForeignKey("meetings.id"), primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id"), primary_key=True)
    response: Mapped[str] = mapped_column(String(20), default="pending")
    responded_utc: Mapped[datetime | None]
    person: Mapped[Person] = relationship()
