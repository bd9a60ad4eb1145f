"""Tests of the calendar environment; `arena env check` runs them."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from environments.sdk.digest import state_hash
from environments.sdk.errors import ErrorCode
from environments.sdk.state import build_seed
from environments.sdk.testing import EnvHarness, ToolCallFailed

from . import env

NOW = "2026-06-15 09:00:00"
MONDAY = "2026-08-03"  # after the seeded period: every room and person is free
TABLES = ("offices", "rooms", "people", "meetings", "attendees")


@pytest.fixture
def h() -> Iterator[EnvHarness]:
    with EnvHarness(env) as harness:
        yield harness


@dataclass(frozen=True)
class Ids:
    """Seed rows the tests rely on, looked up by their properties rather than hard-coded."""

    organizer: int  # active, London
    colleagues: list[int]  # other active London people
    inactive: int
    room: int  # open London room
    capacity: int
    other_room: int  # another open London room, at least as large
    closed_room: int
    tiny_room: int  # open two-seat room (in Singapore)
    future_meeting: int  # scheduled, not started, with at least two invitees
    past_meeting: int  # scheduled, already over


@pytest.fixture
def ids(h: EnvHarness) -> Ids:
    lon = [r[0] for r in h.query("SELECT id FROM people WHERE office_id = 'LON' AND active ORDER BY id")]
    rooms = h.query(
        "SELECT id, capacity FROM rooms WHERE office_id = 'LON' AND status = 'active' ORDER BY capacity, id"
    )
    future = h.query(
        "SELECT m.id FROM meetings m JOIN attendees a ON a.meeting_id = m.id WHERE m.status = 'scheduled' "
        "AND m.start_utc > ? GROUP BY m.id HAVING COUNT(*) >= 2 ORDER BY m.id",
        NOW,
    )
    return Ids(
        organizer=lon[0],
        colleagues=lon[1:],
        inactive=h.query("SELECT id FROM people WHERE NOT active ORDER BY id")[0][0],
        room=rooms[0][0],
        capacity=rooms[0][1],
        other_room=rooms[-1][0],
        closed_room=h.query("SELECT id FROM rooms WHERE status = 'maintenance' ORDER BY id")[0][0],
        tiny_room=h.query("SELECT id FROM rooms WHERE status = 'active' AND capacity = 2 ORDER BY id")[0][0],
        future_meeting=future[0][0],
        past_meeting=h.query("SELECT id FROM meetings WHERE status = 'scheduled' AND end_utc < ?", NOW)[0][0],
    )


def fails(h: EnvHarness, code: ErrorCode, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail with ``code``; return the error message."""
    with pytest.raises(ToolCallFailed) as err:
        h.call(tool, **arguments)
    assert err.value.code == code, err.value.message
    return err.value.message


def book(h: EnvHarness, ids: Ids, **overrides: Any) -> dict:
    """Book a one-hour meeting in the London room, 10:00-11:00 local on MONDAY, with two colleagues."""
    arguments = {
        "organizer_id": ids.organizer,
        "title": "Quarterly planning",
        "start_utc": f"{MONDAY}T09:00:00",
        "end_utc": f"{MONDAY}T10:00:00",
        "attendee_ids": ids.colleagues[:2],
        "room_id": ids.room,
    }
    return h.call("schedule_meeting", **{**arguments, **overrides})


def row_counts(h: EnvHarness) -> dict[str, int]:
    return {table: h.query(f"SELECT COUNT(*) FROM {table}")[0][0] for table in TABLES}


# --- seed ------------------------------------------------------------------------------------------


def test_seed_has_enough_related_rows(h: EnvHarness) -> None:
    counts = row_counts(h)
    assert sum(counts.values()) >= 200
    assert all(count > 0 for count in counts.values())
    assert counts == {
        "offices": 6,
        "rooms": 30,
        "people": 72,
        "meetings": 140,
        "attendees": counts["attendees"],
    }
    orphans = h.query(
        "SELECT COUNT(*) FROM attendees a LEFT JOIN people p ON p.id = a.person_id WHERE p.id IS NULL"
    )
    assert orphans == [(0,)]


def test_seed_respects_the_business_rules(h: EnvHarness) -> None:
    double_booked = h.query(
        "SELECT COUNT(*) FROM meetings a JOIN meetings b ON a.room_id = b.room_id AND a.id < b.id "
        "AND a.start_utc < b.end_utc AND b.start_utc < a.end_utc "
        "WHERE a.status = 'scheduled' AND b.status = 'scheduled'"
    )
    assert double_booked == [(0,)]
    over_capacity = h.query(
        "SELECT COUNT(*) FROM meetings m JOIN rooms r ON r.id = m.room_id "
        "WHERE 1 + (SELECT COUNT(*) FROM attendees a WHERE a.meeting_id = m.id) > r.capacity"
    )
    assert over_capacity == [(0,)]


def test_seed_is_deterministic(tmp_path: Path) -> None:
    build_seed(env, tmp_path / "a.db")
    build_seed(env, tmp_path / "b.db")
    assert state_hash(sqlite3.connect(tmp_path / "a.db")) == state_hash(sqlite3.connect(tmp_path / "b.db"))


# --- people ----------------------------------------------------------------------------------------


def test_get_person(h: EnvHarness, ids: Ids) -> None:
    person = h.call("get_person", person_id=ids.organizer)
    assert person["id"] == ids.organizer
    assert (person["office_id"], person["city"], person["timezone"]) == ("LON", "London", "Europe/London")
    assert person["email"].endswith("@northwind.example") and person["active"] is True
    assert fails(h, ErrorCode.NOT_FOUND, "get_person", person_id=9999) == "no person with id 9999"


def test_search_people_filters_and_orders(h: EnvHarness, ids: Ids) -> None:
    people = h.call("search_people", office_id="LON", limit=100)
    expected = h.query("SELECT id FROM people WHERE office_id = 'LON' AND active ORDER BY name, id")
    assert [p["id"] for p in people] == [row[0] for row in expected]
    engineers = h.call("search_people", department="Engineering", limit=100)
    assert engineers and all(p["department"] == "Engineering" and p["active"] for p in engineers)
    inactive = h.call("get_person", person_id=ids.inactive)
    surname = inactive["name"].split()[-1]
    assert ids.inactive not in [p["id"] for p in h.call("search_people", name=surname)]
    found = h.call("search_people", name=surname.upper(), include_inactive=True)
    assert ids.inactive in [p["id"] for p in found]
    assert len(h.call("search_people", limit=3)) == 3


def test_search_people_errors(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "search_people", office_id="PAR")
    fails(h, ErrorCode.VALIDATION_ERROR, "search_people", department="Astrology")
    fails(h, ErrorCode.VALIDATION_ERROR, "search_people", limit=0)


# --- rooms -----------------------------------------------------------------------------------------


def test_get_room_lists_upcoming_bookings(h: EnvHarness, ids: Ids) -> None:
    booked = book(h, ids)
    room = h.call("get_room", room_id=ids.room)
    assert room["id"] == ids.room and room["capacity"] == ids.capacity and isinstance(room["equipment"], list)
    upcoming = room["upcoming_meetings"]
    starts = [m["start_utc"] for m in upcoming]
    assert starts == sorted(starts) and all(m["end_utc"] > NOW.replace(" ", "T") for m in upcoming)
    assert all(m["room_id"] == ids.room and m["status"] == "scheduled" for m in upcoming)
    expected = h.query(
        "SELECT COUNT(*) FROM meetings WHERE room_id = ? AND status = 'scheduled' AND end_utc > ?",
        ids.room,
        NOW,
    )[0][0]
    assert len(upcoming) == min(expected, 10)
    assert booked["id"] in [m["id"] for m in upcoming] or len(upcoming) == 10
    fails(h, ErrorCode.NOT_FOUND, "get_room", room_id=999)


def test_search_rooms_filters(h: EnvHarness) -> None:
    rooms = h.call("search_rooms", min_capacity=10, equipment=["projector", "video_conferencing"], limit=100)
    assert rooms
    assert all(
        r["capacity"] >= 10 and {"projector", "video_conferencing"} <= set(r["equipment"]) for r in rooms
    )
    assert [r["capacity"] for r in rooms] == sorted(r["capacity"] for r in rooms)
    expected = h.query("SELECT COUNT(*) FROM rooms WHERE status = 'active'")[0][0]
    assert len(h.call("search_rooms", limit=100)) == expected
    assert len(h.call("search_rooms", include_closed=True, limit=100)) == 30
    berlin = h.call("search_rooms", office_id="BER")
    assert berlin and {r["city"] for r in berlin} == {"Berlin"}


def test_search_rooms_free_window(h: EnvHarness, ids: Ids) -> None:
    window = {
        "office_id": "LON",
        "free_from_utc": f"{MONDAY}T09:30:00",
        "free_until_utc": f"{MONDAY}T11:00:00",
    }
    assert ids.room in [r["id"] for r in h.call("search_rooms", **window)]
    book(h, ids)
    assert ids.room not in [r["id"] for r in h.call("search_rooms", **window)]
    after = {**window, "free_from_utc": f"{MONDAY}T10:00:00"}  # back-to-back is fine
    assert ids.room in [r["id"] for r in h.call("search_rooms", **after)]


def test_search_rooms_errors(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "search_rooms", office_id="XYZ")
    fails(h, ErrorCode.VALIDATION_ERROR, "search_rooms", free_from_utc=f"{MONDAY}T09:00:00")
    reversed_window = {"free_from_utc": f"{MONDAY}T10:00:00", "free_until_utc": f"{MONDAY}T09:00:00"}
    fails(h, ErrorCode.VALIDATION_ERROR, "search_rooms", **reversed_window)
    fails(h, ErrorCode.VALIDATION_ERROR, "search_rooms", equipment=["jacuzzi"])
    fails(h, ErrorCode.VALIDATION_ERROR, "search_rooms", min_capacity=0)


# --- meetings: reads -------------------------------------------------------------------------------


def test_get_meeting(h: EnvHarness, ids: Ids) -> None:
    meeting = h.call("get_meeting", meeting_id=ids.future_meeting)
    invitees = h.query(
        "SELECT person_id, response FROM attendees WHERE meeting_id = ? ORDER BY person_id",
        ids.future_meeting,
    )
    assert [(a["person_id"], a["response"]) for a in meeting["attendees"]] == invitees
    assert meeting["invitee_count"] == len(invitees)
    offset = h.query("SELECT utc_offset_minutes FROM offices WHERE id = ?", meeting["office_id"])[0][0]
    start = datetime.fromisoformat(meeting["start_utc"])
    assert meeting["start_local"] == (start + timedelta(minutes=offset)).isoformat(timespec="minutes")
    end = datetime.fromisoformat(meeting["end_utc"])
    assert meeting["duration_minutes"] == (end - start) // timedelta(minutes=1)
    fails(h, ErrorCode.NOT_FOUND, "get_meeting", meeting_id=99999)


def test_list_meetings_for_a_person(h: EnvHarness, ids: Ids) -> None:
    person = h.query("SELECT person_id FROM attendees GROUP BY person_id ORDER BY COUNT(*) DESC, person_id")[
        0
    ][0]
    meetings = h.call("list_meetings", person_id=person, limit=100)
    expected = h.query(
        "SELECT COUNT(*) FROM meetings WHERE organizer_id = ? "
        "OR id IN (SELECT meeting_id FROM attendees WHERE person_id = ?)",
        person,
        person,
    )[0][0]
    assert len(meetings) == expected
    starts = [m["start_utc"] for m in meetings]
    assert starts == sorted(starts)
    scheduled = h.call(
        "list_meetings", person_id=person, status="scheduled", start_from_utc="2026-06-15T09:00:00"
    )
    assert all(m["status"] == "scheduled" and m["start_utc"] >= "2026-06-15T09:00:00" for m in scheduled)


def test_list_meetings_other_filters(h: EnvHarness, ids: Ids) -> None:
    in_room = h.call("list_meetings", room_id=ids.room, limit=100)
    assert in_room and all(m["room_id"] == ids.room for m in in_room)
    june = h.call(
        "list_meetings", start_from_utc="2026-06-01T00:00:00", start_before_utc="2026-06-08T00:00:00"
    )
    assert june and all("2026-06-01" <= m["start_utc"] < "2026-06-08" for m in june)
    cancelled = h.call("list_meetings", status="cancelled", limit=100)
    assert len(cancelled) == h.query("SELECT COUNT(*) FROM meetings WHERE status = 'cancelled'")[0][0]
    reviews = h.call("list_meetings", title_contains="REVIEW", limit=100)
    assert reviews and all("review" in m["title"].lower() for m in reviews)
    assert len(h.call("list_meetings", limit=5)) == 5


def test_list_meetings_errors(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "list_meetings", person_id=9999)
    fails(h, ErrorCode.NOT_FOUND, "list_meetings", room_id=9999)
    fails(h, ErrorCode.VALIDATION_ERROR, "list_meetings", status="postponed")


# --- free time -------------------------------------------------------------------------------------


def test_find_free_slots_around_a_meeting(h: EnvHarness, ids: Ids) -> None:
    people = [ids.organizer, ids.colleagues[0]]
    whole_day = h.call("find_free_slots", person_ids=people, day=MONDAY, duration_minutes=60)
    assert [(s["start_local"], s["end_local"]) for s in whole_day] == [(f"{MONDAY}T08:00", f"{MONDAY}T19:00")]
    book(h, ids)  # 10:00-11:00 London time, the colleague is invited
    slots = h.call("find_free_slots", person_ids=people, day=MONDAY, duration_minutes=60)
    assert [(s["start_utc"], s["end_utc"]) for s in slots] == [
        (f"{MONDAY}T07:00:00", f"{MONDAY}T09:00:00"),
        (f"{MONDAY}T10:00:00", f"{MONDAY}T18:00:00"),
    ]
    assert len(h.call("find_free_slots", person_ids=people, day=MONDAY, duration_minutes=180)) == 1


def test_find_free_slots_ignores_declined_and_honours_rooms(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    colleague, outsider = ids.colleagues[0], ids.colleagues[5]
    h.call("respond_to_invitation", meeting_id=meeting["id"], person_id=colleague, response="declined")
    assert len(h.call("find_free_slots", person_ids=[colleague], day=MONDAY, duration_minutes=30)) == 1
    with_room = h.call(
        "find_free_slots", person_ids=[outsider], day=MONDAY, duration_minutes=30, room_id=ids.room
    )
    assert with_room[0]["end_utc"] == f"{MONDAY}T09:00:00"
    singapore = h.call(
        "find_free_slots", person_ids=[outsider], day=MONDAY, duration_minutes=30, office_id="SIN"
    )
    assert (singapore[0]["start_utc"], singapore[0]["timezone"]) == (f"{MONDAY}T00:00:00", "Asia/Singapore")


def test_find_free_slots_on_a_past_day_is_empty(h: EnvHarness, ids: Ids) -> None:
    assert h.call("find_free_slots", person_ids=[ids.organizer], day="2026-06-01", duration_minutes=30) == []


def test_find_free_slots_errors(h: EnvHarness, ids: Ids) -> None:
    base = {"person_ids": [ids.organizer], "day": MONDAY, "duration_minutes": 60}
    fails(h, ErrorCode.NOT_FOUND, "find_free_slots", **{**base, "person_ids": [ids.organizer, 9999]})
    fails(h, ErrorCode.NOT_FOUND, "find_free_slots", **base, room_id=9999)
    fails(h, ErrorCode.NOT_FOUND, "find_free_slots", **base, office_id="ZZZ")
    fails(h, ErrorCode.PRECONDITION_FAILED, "find_free_slots", **{**base, "person_ids": [ids.inactive]})
    fails(h, ErrorCode.PRECONDITION_FAILED, "find_free_slots", **base, room_id=ids.closed_room)
    crowd = {**base, "person_ids": [ids.organizer, *ids.colleagues[:4]]}
    fails(h, ErrorCode.LIMIT_EXCEEDED, "find_free_slots", **crowd, room_id=ids.tiny_room)
    fails(h, ErrorCode.VALIDATION_ERROR, "find_free_slots", **base, room_id=ids.room, office_id="NYC")
    fails(h, ErrorCode.VALIDATION_ERROR, "find_free_slots", **{**base, "day": "2026-08-01"})  # Saturday
    fails(h, ErrorCode.VALIDATION_ERROR, "find_free_slots", **{**base, "duration_minutes": 20})
    fails(h, ErrorCode.VALIDATION_ERROR, "find_free_slots", **{**base, "person_ids": []})


# --- report ----------------------------------------------------------------------------------------


def test_room_utilization_report_counts_new_bookings(h: EnvHarness, ids: Ids) -> None:
    book(h, ids)
    book(h, ids, start_utc=f"{MONDAY}T12:00:00", end_utc=f"{MONDAY}T13:30:00", attendee_ids=[])
    report = h.call(
        "room_utilization_report", start_date="2026-08-01", end_date="2026-08-31", office_id="LON"
    )
    assert (
        report["working_days"] == 21 and report["total_meetings"] == 2 and report["total_booked_hours"] == 2.5
    )
    top = report["rooms"][0]
    assert (top["room_id"], top["meetings"], top["booked_hours"]) == (ids.room, 2, 2.5)
    assert top["utilization_pct"] == round(100 * 2.5 / (21 * 11), 1)
    assert len(report["rooms"]) == 5 and {r["office_id"] for r in report["rooms"]} == {"LON"}


def test_room_utilization_report_matches_the_database(h: EnvHarness) -> None:
    report = h.call("room_utilization_report", start_date="2026-06-01", end_date="2026-06-30")
    assert len(report["rooms"]) == 30
    pcts = [r["utilization_pct"] for r in report["rooms"]]
    assert pcts == sorted(pcts, reverse=True)
    rows = h.query(
        "SELECT m.start_utc, m.end_utc, o.utc_offset_minutes FROM meetings m "
        "JOIN rooms r ON r.id = m.room_id JOIN offices o ON o.id = r.office_id WHERE m.status = 'scheduled'"
    )
    spans = [
        (datetime.fromisoformat(start), datetime.fromisoformat(end), timedelta(minutes=offset))
        for start, end, offset in rows
    ]
    in_june = [(s, e) for s, e, offset in spans if (s + offset).strftime("%Y-%m") == "2026-06"]
    assert report["total_meetings"] == len(in_june) > 0
    assert report["total_booked_hours"] == round(sum((e - s).total_seconds() for s, e in in_june) / 3600, 2)


def test_room_utilization_report_errors(h: EnvHarness) -> None:
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "room_utilization_report",
        start_date="2026-07-01",
        end_date="2026-06-01",
    )
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "room_utilization_report",
        start_date="2026-01-01",
        end_date="2026-12-31",
    )
    fails(
        h,
        ErrorCode.NOT_FOUND,
        "room_utilization_report",
        start_date="2026-06-01",
        end_date="2026-06-30",
        office_id="MAD",
    )


# --- scheduling ------------------------------------------------------------------------------------


def test_schedule_meeting_in_a_room(h: EnvHarness, ids: Ids) -> None:
    before = row_counts(h)
    meeting = book(h, ids, description="Bring the numbers.")
    assert meeting["status"] == "scheduled" and meeting["room_id"] == ids.room
    assert (meeting["start_local"], meeting["end_local"]) == (f"{MONDAY}T10:00", f"{MONDAY}T11:00")
    assert meeting["created_utc"] == NOW.replace(" ", "T")
    assert [(a["person_id"], a["response"]) for a in meeting["attendees"]] == [
        (p, "pending") for p in sorted(ids.colleagues[:2])
    ]
    after = row_counts(h)
    assert after["meetings"] == before["meetings"] + 1 and after["attendees"] == before["attendees"] + 2
    stored = h.query("SELECT title, description, organizer_id FROM meetings WHERE id = ?", meeting["id"])
    assert stored == [("Quarterly planning", "Bring the numbers.", ids.organizer)]


def test_schedule_online_meeting_uses_the_organizers_office(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids, room_id=None, attendee_ids=ids.colleagues[:10])
    assert meeting["room_id"] is None and meeting["timezone"] == "Europe/London"
    assert meeting["invitee_count"] == 10  # no room, no capacity limit
    # 07:30 London time is before working hours.
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "schedule_meeting",
        organizer_id=ids.organizer,
        title="Early call",
        start_utc=f"{MONDAY}T06:30:00",
        end_utc=f"{MONDAY}T07:30:00",
    )


def test_schedule_meeting_accepts_time_zone_offsets(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids, start_utc=f"{MONDAY}T10:00:00+01:00", end_utc=f"{MONDAY}T11:00:00+01:00")
    assert (meeting["start_utc"], meeting["end_utc"]) == (f"{MONDAY}T09:00:00", f"{MONDAY}T10:00:00")


def test_schedule_meeting_working_hours_edges(h: EnvHarness, ids: Ids) -> None:
    first = book(h, ids, start_utc=f"{MONDAY}T07:00:00", end_utc=f"{MONDAY}T08:00:00")  # 08:00 London
    last = book(h, ids, start_utc=f"{MONDAY}T17:00:00", end_utc=f"{MONDAY}T18:00:00")  # ends 19:00 London
    assert (first["start_local"], last["end_local"]) == (f"{MONDAY}T08:00", f"{MONDAY}T19:00")
    back_to_back = book(h, ids, start_utc=f"{MONDAY}T08:00:00", end_utc=f"{MONDAY}T09:00:00")
    assert back_to_back["room_id"] == ids.room


def test_schedule_meeting_ignores_cancelled_bookings(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    h.call("cancel_meeting", meeting_id=meeting["id"], requested_by=ids.organizer)
    again = book(h, ids)
    assert (again["status"], again["room_id"], again["start_utc"]) == (
        "scheduled",
        ids.room,
        meeting["start_utc"],
    )


Overrides = Callable[[Ids], dict[str, Any]]
SCHEDULE_ERRORS: list[tuple[str, ErrorCode, Overrides]] = [
    ("unknown organizer", ErrorCode.NOT_FOUND, lambda i: {"organizer_id": 9999}),
    ("unknown room", ErrorCode.NOT_FOUND, lambda i: {"room_id": 9999}),
    ("unknown attendee", ErrorCode.NOT_FOUND, lambda i: {"attendee_ids": [i.colleagues[0], 9999]}),
    (
        "inactive organizer",
        ErrorCode.PRECONDITION_FAILED,
        lambda i: {"organizer_id": i.inactive, "room_id": None},
    ),
    ("inactive attendee", ErrorCode.PRECONDITION_FAILED, lambda i: {"attendee_ids": [i.inactive]}),
    ("room in maintenance", ErrorCode.PRECONDITION_FAILED, lambda i: {"room_id": i.closed_room}),
    ("end before start", ErrorCode.VALIDATION_ERROR, lambda i: {"end_utc": f"{MONDAY}T08:30:00"}),
    ("zero length", ErrorCode.VALIDATION_ERROR, lambda i: {"end_utc": f"{MONDAY}T09:00:00"}),
    (
        "in the past",
        ErrorCode.VALIDATION_ERROR,
        lambda i: {"start_utc": "2026-06-15T08:00:00", "end_utc": "2026-06-15T08:30:00"},
    ),
    ("off the 15-minute grid", ErrorCode.VALIDATION_ERROR, lambda i: {"end_utc": f"{MONDAY}T09:50:00"}),
    (
        "weekend",
        ErrorCode.VALIDATION_ERROR,
        lambda i: {"start_utc": "2026-08-01T09:00:00", "end_utc": "2026-08-01T10:00:00"},
    ),
    ("before 08:00 local", ErrorCode.VALIDATION_ERROR, lambda i: {"start_utc": f"{MONDAY}T06:45:00"}),
    ("after 19:00 local", ErrorCode.VALIDATION_ERROR, lambda i: {"end_utc": f"{MONDAY}T18:15:00"}),
    ("organizer invited", ErrorCode.VALIDATION_ERROR, lambda i: {"attendee_ids": [i.organizer]}),
    ("duplicate invitee", ErrorCode.VALIDATION_ERROR, lambda i: {"attendee_ids": [i.colleagues[0]] * 2}),
    ("title too short", ErrorCode.VALIDATION_ERROR, lambda i: {"title": "x"}),
    ("over capacity", ErrorCode.LIMIT_EXCEEDED, lambda i: {"attendee_ids": i.colleagues[: i.capacity]}),
]


@pytest.mark.parametrize(("case", "code", "overrides"), SCHEDULE_ERRORS, ids=[c[0] for c in SCHEDULE_ERRORS])
def test_schedule_meeting_errors(
    h: EnvHarness, ids: Ids, case: str, code: ErrorCode, overrides: Overrides
) -> None:
    before = row_counts(h)
    with pytest.raises(ToolCallFailed) as err:
        book(h, ids, **overrides(ids))
    assert err.value.code == code, (case, err.value.message)
    assert row_counts(h) == before


def test_schedule_meeting_capacity_counts_the_organizer(h: EnvHarness, ids: Ids) -> None:
    full = book(h, ids, attendee_ids=ids.colleagues[: ids.capacity - 1])
    assert full["invitee_count"] + 1 == ids.capacity


def test_schedule_meeting_double_booking_is_a_conflict(h: EnvHarness, ids: Ids) -> None:
    first = book(h, ids)
    message = fails(
        h,
        ErrorCode.CONFLICT,
        "schedule_meeting",
        organizer_id=ids.colleagues[3],
        title="Overlapping sync",
        start_utc=f"{MONDAY}T09:45:00",
        end_utc=f"{MONDAY}T10:15:00",
        room_id=ids.room,
    )
    assert f"meeting {first['id']}" in message


def test_failed_write_leaves_no_partial_changes(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids, room_id=None)
    book(h, ids, organizer_id=ids.colleagues[5], attendee_ids=[])  # holds the room 09:00-10:00 UTC
    before = h.state.state_hash()
    # The first two people are valid; the third one has left, so nobody may be added.
    invite = [ids.colleagues[2], ids.colleagues[3], ids.inactive]
    fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "invite_attendees",
        meeting_id=meeting["id"],
        requested_by=ids.organizer,
        person_ids=invite,
    )
    fails(
        h,
        ErrorCode.CONFLICT,
        "reschedule_meeting",
        meeting_id=meeting["id"],
        requested_by=ids.organizer,
        new_start_utc=f"{MONDAY}T09:00:00",
        new_end_utc=f"{MONDAY}T10:00:00",
        new_room_id=ids.room,
    )
    assert h.state.state_hash() == before
    assert h.call("get_meeting", meeting_id=meeting["id"])["invitee_count"] == 2


def test_read_tools_do_not_change_state(h: EnvHarness, ids: Ids) -> None:
    before = h.state.state_hash()
    h.call("get_person", person_id=ids.organizer)
    h.call("search_people", name="a")
    h.call("get_room", room_id=ids.room)
    h.call("search_rooms", equipment=["whiteboard"])
    h.call("get_meeting", meeting_id=ids.future_meeting)
    h.call("list_meetings", person_id=ids.organizer)
    h.call("find_free_slots", person_ids=[ids.organizer], day=MONDAY, duration_minutes=30)
    h.call("room_utilization_report", start_date="2026-06-01", end_date="2026-06-30")
    assert h.state.state_hash() == before


# --- changing meetings -----------------------------------------------------------------------------


def test_reschedule_meeting_resets_responses(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    h.call(
        "respond_to_invitation", meeting_id=meeting["id"], person_id=ids.colleagues[0], response="accepted"
    )
    # Overlapping its own old slot is fine.
    moved = h.call(
        "reschedule_meeting",
        meeting_id=meeting["id"],
        requested_by=ids.organizer,
        new_start_utc=f"{MONDAY}T09:30:00",
        new_end_utc=f"{MONDAY}T10:30:00",
    )
    assert (moved["start_local"], moved["room_id"]) == (f"{MONDAY}T10:30", ids.room)
    assert {(a["response"], a["responded_utc"]) for a in moved["attendees"]} == {("pending", None)}
    stored = h.query("SELECT start_utc FROM meetings WHERE id = ?", meeting["id"])[0][0]
    assert stored.startswith(f"{MONDAY} 09:30")


def test_reschedule_meeting_to_another_room(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    moved = h.call(
        "reschedule_meeting",
        meeting_id=meeting["id"],
        requested_by=ids.organizer,
        new_start_utc=f"{MONDAY}T14:00:00",
        new_end_utc=f"{MONDAY}T15:00:00",
        new_room_id=ids.other_room,
    )
    assert moved["room_id"] == ids.other_room
    assert book(h, ids)["room_id"] == ids.room  # the old slot is free again


def test_reschedule_meeting_errors(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    book(h, ids, start_utc=f"{MONDAY}T11:00:00", end_utc=f"{MONDAY}T12:00:00")
    slot = {"new_start_utc": f"{MONDAY}T14:00:00", "new_end_utc": f"{MONDAY}T15:00:00"}
    mine = {"meeting_id": meeting["id"], "requested_by": ids.organizer}
    fails(h, ErrorCode.NOT_FOUND, "reschedule_meeting", meeting_id=99999, requested_by=ids.organizer, **slot)
    fails(h, ErrorCode.NOT_FOUND, "reschedule_meeting", meeting_id=meeting["id"], requested_by=9999, **slot)
    fails(h, ErrorCode.NOT_FOUND, "reschedule_meeting", **mine, **slot, new_room_id=9999)
    message = fails(
        h,
        ErrorCode.FORBIDDEN,
        "reschedule_meeting",
        meeting_id=meeting["id"],
        requested_by=ids.colleagues[0],
        **slot,
    )
    assert "organizer" in message
    fails(h, ErrorCode.PRECONDITION_FAILED, "reschedule_meeting", **mine, **slot, new_room_id=ids.closed_room)
    singapore_morning = {"new_start_utc": f"{MONDAY}T02:00:00", "new_end_utc": f"{MONDAY}T03:00:00"}
    fails(
        h,
        ErrorCode.LIMIT_EXCEEDED,
        "reschedule_meeting",
        **mine,
        **singapore_morning,
        new_room_id=ids.tiny_room,
    )
    fails(
        h,
        ErrorCode.CONFLICT,
        "reschedule_meeting",
        **mine,
        new_start_utc=f"{MONDAY}T10:30:00",
        new_end_utc=f"{MONDAY}T11:30:00",
    )
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "reschedule_meeting",
        **mine,
        new_start_utc=f"{MONDAY}T15:00:00",
        new_end_utc=f"{MONDAY}T14:00:00",
    )
    past = h.query("SELECT organizer_id FROM meetings WHERE id = ?", ids.past_meeting)[0][0]
    fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "reschedule_meeting",
        meeting_id=ids.past_meeting,
        requested_by=past,
        **slot,
    )
    h.call("cancel_meeting", **mine)
    fails(h, ErrorCode.PRECONDITION_FAILED, "reschedule_meeting", **mine, **slot)


def test_cancel_meeting(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    cancelled = h.call(
        "cancel_meeting", meeting_id=meeting["id"], requested_by=ids.organizer, reason="Budget frozen"
    )
    assert (cancelled["status"], cancelled["cancel_reason"]) == ("cancelled", "Budget frozen")
    stored = h.query("SELECT status, cancel_reason FROM meetings WHERE id = ?", meeting["id"])
    assert stored == [("cancelled", "Budget frozen")]
    assert meeting["id"] not in [m["id"] for m in h.call("get_room", room_id=ids.room)["upcoming_meetings"]]


def test_cancel_meeting_errors(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    fails(h, ErrorCode.NOT_FOUND, "cancel_meeting", meeting_id=99999, requested_by=ids.organizer)
    fails(h, ErrorCode.NOT_FOUND, "cancel_meeting", meeting_id=meeting["id"], requested_by=9999)
    fails(h, ErrorCode.FORBIDDEN, "cancel_meeting", meeting_id=meeting["id"], requested_by=ids.colleagues[0])
    past = h.query("SELECT organizer_id FROM meetings WHERE id = ?", ids.past_meeting)[0][0]
    fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_meeting", meeting_id=ids.past_meeting, requested_by=past)
    h.call("cancel_meeting", meeting_id=meeting["id"], requested_by=ids.organizer)
    message = fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "cancel_meeting",
        meeting_id=meeting["id"],
        requested_by=ids.organizer,
    )
    assert "cancelled" in message


def test_invite_attendees(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    new = ids.colleagues[2:4]
    updated = h.call("invite_attendees", meeting_id=meeting["id"], requested_by=ids.organizer, person_ids=new)
    assert updated["invitee_count"] == 4
    assert {a["person_id"]: a["response"] for a in updated["attendees"]}.keys() >= set(new)
    pending = h.query(
        "SELECT COUNT(*) FROM attendees WHERE meeting_id = ? AND response = 'pending'", meeting["id"]
    )
    assert pending == [(4,)]


def test_invite_attendees_errors(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    mine = {"meeting_id": meeting["id"], "requested_by": ids.organizer}
    fails(
        h,
        ErrorCode.NOT_FOUND,
        "invite_attendees",
        meeting_id=99999,
        requested_by=ids.organizer,
        person_ids=[ids.colleagues[2]],
    )
    fails(h, ErrorCode.NOT_FOUND, "invite_attendees", **mine, person_ids=[9999])
    fails(
        h,
        ErrorCode.FORBIDDEN,
        "invite_attendees",
        meeting_id=meeting["id"],
        requested_by=ids.colleagues[0],
        person_ids=[ids.colleagues[2]],
    )
    fails(h, ErrorCode.CONFLICT, "invite_attendees", **mine, person_ids=[ids.colleagues[0]])
    fails(h, ErrorCode.VALIDATION_ERROR, "invite_attendees", **mine, person_ids=[ids.organizer])
    fails(h, ErrorCode.PRECONDITION_FAILED, "invite_attendees", **mine, person_ids=[ids.inactive])
    seats_left = ids.capacity - 3
    fails(
        h, ErrorCode.LIMIT_EXCEEDED, "invite_attendees", **mine, person_ids=ids.colleagues[2 : 3 + seats_left]
    )
    h.call("cancel_meeting", **mine)
    fails(h, ErrorCode.PRECONDITION_FAILED, "invite_attendees", **mine, person_ids=[ids.colleagues[2]])


def test_respond_to_invitation(h: EnvHarness, ids: Ids) -> None:
    invitee = h.query(
        "SELECT person_id FROM attendees WHERE meeting_id = ? ORDER BY person_id", ids.future_meeting
    )
    person = invitee[0][0]
    answer = h.call(
        "respond_to_invitation", meeting_id=ids.future_meeting, person_id=person, response="tentative"
    )
    assert (answer["response"], answer["responded_utc"]) == ("tentative", NOW.replace(" ", "T"))
    assert answer["meeting"]["id"] == ids.future_meeting
    stored = h.query(
        "SELECT response FROM attendees WHERE meeting_id = ? AND person_id = ?", ids.future_meeting, person
    )
    assert stored == [("tentative",)]


def test_respond_to_invitation_errors(h: EnvHarness, ids: Ids) -> None:
    meeting = book(h, ids)
    invitee = ids.colleagues[0]
    fails(
        h,
        ErrorCode.NOT_FOUND,
        "respond_to_invitation",
        meeting_id=99999,
        person_id=invitee,
        response="accepted",
    )
    fails(
        h,
        ErrorCode.NOT_FOUND,
        "respond_to_invitation",
        meeting_id=meeting["id"],
        person_id=9999,
        response="accepted",
    )
    fails(
        h,
        ErrorCode.NOT_FOUND,
        "respond_to_invitation",
        meeting_id=meeting["id"],
        person_id=ids.organizer,
        response="accepted",
    )
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "respond_to_invitation",
        meeting_id=meeting["id"],
        person_id=invitee,
        response="maybe",
    )
    past_invitee = h.query("SELECT person_id FROM attendees WHERE meeting_id = ?", ids.past_meeting)[0][0]
    fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "respond_to_invitation",
        meeting_id=ids.past_meeting,
        person_id=past_invitee,
        response="declined",
    )
    h.call("cancel_meeting", meeting_id=meeting["id"], requested_by=ids.organizer)
    fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "respond_to_invitation",
        meeting_id=meeting["id"],
        person_id=invitee,
        response="accepted",
    )


# --- argument validation ---------------------------------------------------------------------------


def test_argument_validation(h: EnvHarness, ids: Ids) -> None:
    outcome = h.outcome("get_meeting", meeting_id="not-a-number")
    assert outcome.error_code == ErrorCode.VALIDATION_ERROR and "meeting_id" in outcome.value["message"]
    missing = h.outcome(
        "schedule_meeting", organizer_id=ids.organizer, title="No start", end_utc=f"{MONDAY}T10:00"
    )
    assert missing.error_code == ErrorCode.VALIDATION_ERROR and "start_utc" in missing.value["message"]
    fails(h, ErrorCode.VALIDATION_ERROR, "get_person", person_id=ids.organizer, extra=True)
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "find_free_slots",
        person_ids=[ids.organizer],
        day="next monday",
        duration_minutes=30,
    )
    assert h.outcome("no_such_tool").error_code == ErrorCode.UNKNOWN_TOOL
