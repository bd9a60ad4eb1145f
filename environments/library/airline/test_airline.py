"""Tests of the airline environment; `arena env check` runs them.

Test data is picked with SQL by the situation a test needs ("an upcoming flight with business seats left",
"two flights of the same route"), not by hard-coded ids; sold-out cabins are produced by booking them full.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from environments.sdk.errors import ErrorCode
from environments.sdk.testing import EnvHarness, ToolCallFailed

from . import env
from .core import cabin_seats
from .models import Aircraft

HELD = "('confirmed', 'checked_in', 'flown')"
ACTIVE = "('confirmed', 'checked_in')"
NOW, IN_24H = "'2026-06-15 12:00:00'", "'2026-06-16 12:00:00'"
WITH_AIRCRAFT = "FROM flights f JOIN aircraft a ON a.id = f.aircraft_id"
WITH_FLIGHT = "FROM bookings b JOIN flights f ON f.id = b.flight_id"
FLIGHTS = f"SELECT f.id {WITH_AIRCRAFT} WHERE {{}} ORDER BY {{}}"
PAIRS = (
    f"SELECT f.id, g.id {WITH_AIRCRAFT} "
    "JOIN flights g ON g.origin = f.origin AND g.destination = f.destination AND g.id <> f.id "
    "JOIN aircraft ga ON ga.id = g.aircraft_id WHERE {} AND {} ORDER BY f.id, g.id"
)


@pytest.fixture
def h() -> Iterator[EnvHarness]:
    with EnvHarness(env) as harness:
        yield harness


# --- SQL fragments about a flight alias `f` (or `g`) and its aircraft alias `a` (or `ga`) -----------------


def sold(cabin: str, f: str = "f") -> str:
    held = f"b.flight_id = {f}.id AND b.cabin = '{cabin}' AND b.status IN {HELD}"
    return f"(SELECT COUNT(*) FROM bookings b WHERE {held})"


def free(cabin: str, f: str = "f", a: str = "a") -> str:
    return f"({a}.{cabin}_seats - {sold(cabin, f)})"


def upcoming(f: str = "f", within_24h: bool = False) -> str:
    """Bookable flights: beyond the 24-hour window, or (``within_24h``) inside it."""
    window = (
        f"{f}.departs_at > {NOW} AND {f}.departs_at < {IN_24H}"
        if within_24h
        else f"{f}.departs_at > {IN_24H}"
    )
    return f"{f}.status IN ('scheduled', 'delayed') AND {window}"


def room(cabin: str = "economy", f: str = "f", a: str = "a") -> str:
    return f"{upcoming(f)} AND {free(cabin, f, a)} > 0"


# --- helpers ----------------------------------------------------------------------------------------


def first(h: EnvHarness, sql: str, *params: Any) -> Any:
    """The first row of a query (its only value if it has one column); fails if the seed has none."""
    rows = h.query(sql, *params)
    assert rows, f"the seed has no row for: {sql}"
    return rows[0][0] if len(rows[0]) == 1 else rows[0]


def flight(h: EnvHarness, condition: str, order: str = "f.departs_at, f.id") -> int:
    return first(h, FLIGHTS.format(condition, order))


def pair(h: EnvHarness, here: str, there: str) -> tuple[int, int]:
    """Two flights of the same route: one matching ``here`` (aliases f, a), the other ``there`` (g, ga)."""
    return first(h, PAIRS.format(here, there))


def passenger_for(h: EnvHarness, flight_id: int, tier: str | None = None, avoid: int = 0) -> int:
    """A passenger booked neither on the flight nor on ``avoid``: a member of ``tier``, or a non-member."""
    sql = (
        "SELECT p.id FROM passengers p LEFT JOIN loyalty_accounts l ON l.passenger_id = p.id "
        "WHERE p.id NOT IN (SELECT passenger_id FROM bookings WHERE flight_id IN (?, ?)) AND "
    )
    if tier:
        return first(h, sql + "l.tier = ? ORDER BY p.id", flight_id, avoid, tier)
    return first(h, sql + "l.id IS NULL ORDER BY p.id", flight_id, avoid)


def book(h: EnvHarness, flight_id: int, tier: str | None = None, avoid: int = 0, **args: Any) -> dict:
    """Book a passenger who is on neither the flight nor ``avoid``."""
    passenger_id = passenger_for(h, flight_id, tier, avoid)
    return h.call("book_flight", passenger_id=passenger_id, flight_id=flight_id, **args)


def fill(h: EnvHarness, flight_id: int, cabin: str = "economy") -> None:
    """Book the cabin's remaining seats."""
    for _ in range(h.call("get_flight", flight_id=flight_id)["seats"][cabin]["available"]):
        book(h, flight_id, cabin=cabin)


def miles(h: EnvHarness, passenger_id: int) -> int:
    return first(h, "SELECT miles_balance FROM loyalty_accounts WHERE passenger_id = ?", passenger_id)


def fails(h: EnvHarness, code: ErrorCode, tool: str, **args: Any) -> str:
    """Call a tool that must fail with ``code``; returns the error message."""
    with pytest.raises(ToolCallFailed) as err:
        h.call(tool, **args)
    assert err.value.code == code, err.value.message
    return err.value.message


# --- seed -------------------------------------------------------------------------------------------


def test_seed_has_200_rows_across_related_tables(h: EnvHarness) -> None:
    tables = ["airports", "aircraft", "flights", "passengers", "loyalty_accounts", "bookings"]
    counts = {t: h.query(f"SELECT COUNT(*) FROM {t}")[0][0] for t in tables}
    assert all(count >= 10 for count in counts.values()), counts
    assert sum(counts.values()) >= 200
    joined = f"SELECT COUNT(*) {WITH_FLIGHT} JOIN passengers p ON p.id = b.passenger_id"
    assert h.query(joined)[0][0] == counts["bookings"]
    assert {s for (s,) in h.query("SELECT DISTINCT status FROM bookings")} == {
        "confirmed",
        "checked_in",
        "flown",
        "cancelled",
    }
    assert {s for (s,) in h.query("SELECT DISTINCT status FROM flights")} == {
        "scheduled",
        "delayed",
        "departed",
        "cancelled",
    }


def test_seed_respects_the_business_rules(h: EnvHarness) -> None:
    overbooked = f"SELECT COUNT(*) {WITH_AIRCRAFT} WHERE {free('economy')} < 0 OR {free('business')} < 0"
    assert h.query(overbooked) == [(0,)]
    by_passenger_and_flight = "GROUP BY passenger_id, flight_id HAVING COUNT(*) > 1"
    double = f"SELECT 1 FROM bookings WHERE status IN {ACTIVE} {by_passenger_and_flight}"
    assert h.query(double) == []
    stale = (
        f"SELECT COUNT(*) {WITH_FLIGHT} WHERE f.status IN ('departed', 'cancelled') AND b.status IN {ACTIVE}"
    )
    assert h.query(stale) == [(0,)]
    early = f"SELECT COUNT(*) {WITH_FLIGHT} WHERE b.status = 'checked_in' AND f.departs_at > {IN_24H}"
    assert h.query(early) == [(0,)]


# --- reads ------------------------------------------------------------------------------------------


def test_get_flight_reports_seats_per_cabin(h: EnvHarness) -> None:
    flight_id = flight(h, f"{upcoming()} AND a.business_seats > 0")
    found = h.call("get_flight", flight_id=flight_id)
    economy, business, model, sold_economy, sold_business = first(
        h,
        f"SELECT a.economy_seats, a.business_seats, a.model, {sold('economy')}, {sold('business')} "
        f"{WITH_AIRCRAFT} WHERE f.id = ?",
        flight_id,
    )
    assert found["id"] == flight_id and found["aircraft_model"] == model
    assert found["seats"] == {
        "economy": {"capacity": economy, "sold": sold_economy, "available": economy - sold_economy},
        "business": {"capacity": business, "sold": sold_business, "available": business - sold_business},
    }
    assert found["departs_at"] > "2026-06-16T12:00:00"
    assert "99999" in fails(h, ErrorCode.NOT_FOUND, "get_flight", flight_id=99999)


def test_search_flights_filters_and_orders(h: EnvHarness) -> None:
    found = h.call("search_flights", origin="sea", date_from="2026-06-16", date_to="2026-06-20", limit=100)
    expected = h.query(
        "SELECT id FROM flights WHERE origin = 'SEA' AND departs_at >= '2026-06-16' "
        "AND departs_at < '2026-06-21' "
        "ORDER BY departs_at, id"
    )
    assert found and [f["id"] for f in found] == [fid for (fid,) in expected]

    roomy = h.call("search_flights", cabin="business", min_seats=3, limit=100)
    assert roomy and all(f["seats"]["business"]["available"] >= 3 for f in roomy)
    assert len(roomy) == len(h.query(FLIGHTS.format(f"{free('business')} >= 3", "f.id")))

    cheap = h.call("search_flights", max_fare=130, limit=100)
    assert cheap and all(f["economy_fare"] <= 130 for f in cheap)
    assert len(cheap) == first(h, "SELECT COUNT(*) FROM flights WHERE economy_fare <= 130")

    cancelled = h.call("search_flights", status="cancelled", destination="SEA")
    expected = h.query(
        "SELECT id FROM flights WHERE status = 'cancelled' AND destination = 'SEA' ORDER BY departs_at, id"
    )
    assert [f["id"] for f in cancelled] == [fid for (fid,) in expected]
    assert len(h.call("search_flights", limit=3)) == 3

    assert "XYZ" in fails(h, ErrorCode.NOT_FOUND, "search_flights", origin="XYZ")
    fails(h, ErrorCode.VALIDATION_ERROR, "search_flights", date_from="2026-06-20", date_to="2026-06-10")
    fails(h, ErrorCode.VALIDATION_ERROR, "search_flights", min_seats=0)


def test_get_passenger_with_loyalty_and_bookings(h: EnvHarness) -> None:
    member, tier, balance = first(
        h, "SELECT passenger_id, tier, miles_balance FROM loyalty_accounts ORDER BY id"
    )
    passenger = h.call("get_passenger", passenger_id=member)
    assert passenger["loyalty"]["tier"] == tier and passenger["loyalty"]["miles_balance"] == balance
    assert len(passenger["bookings"]) == first(
        h, "SELECT COUNT(*) FROM bookings WHERE passenger_id = ?", member
    )
    departures = [b["departs_at"] for b in passenger["bookings"]]
    assert departures == sorted(departures)
    guest = first(h, "SELECT id FROM passengers WHERE id NOT IN (SELECT passenger_id FROM loyalty_accounts)")
    assert h.call("get_passenger", passenger_id=guest)["loyalty"] is None
    fails(h, ErrorCode.NOT_FOUND, "get_passenger", passenger_id=99999)


def test_find_passengers_by_name_email_and_tier(h: EnvHarness) -> None:
    pid, first_name, last_name, email = first(
        h, "SELECT id, first_name, last_name, email FROM passengers WHERE id = 1"
    )
    full_name = f"{first_name} {last_name}"
    by_name = h.call("find_passengers", name=full_name.upper(), limit=100)
    assert pid in [p["id"] for p in by_name]
    assert all(full_name.lower() in f"{p['first_name']} {p['last_name']}".lower() for p in by_name)
    by_last = h.call("find_passengers", name=last_name.lower(), limit=100)
    keys = [(p["last_name"], p["first_name"], p["id"]) for p in by_last]
    assert len(keys) > 1 and keys == sorted(keys)
    assert [p["id"] for p in h.call("find_passengers", email=email)] == [pid]
    platinum = h.call("find_passengers", tier="platinum", limit=100)
    assert len(platinum) == first(h, "SELECT COUNT(*) FROM loyalty_accounts WHERE tier = 'platinum'")
    assert all(p["loyalty_tier"] == "platinum" and p["miles_balance"] > 0 for p in platinum)
    assert len(h.call("find_passengers", limit=5)) == 5
    assert h.call("find_passengers", name="Zebedee Quux") == []


def test_get_booking(h: EnvHarness) -> None:
    booking_id, passenger_id, flight_id, price = first(
        h, "SELECT id, passenger_id, flight_id, price FROM bookings WHERE status = 'flown' ORDER BY id"
    )
    booking = h.call("get_booking", booking_id=booking_id)
    assert (booking["passenger_id"], booking["flight_id"], booking["price"]) == (
        passenger_id,
        flight_id,
        price,
    )
    number, route = first(
        h, "SELECT flight_number, origin || '-' || destination FROM flights WHERE id = ?", flight_id
    )
    assert (booking["flight_number"], booking["route"], booking["status"]) == (number, route, "flown")
    assert booking["seat"] is not None and booking["passenger_name"]
    fails(h, ErrorCode.NOT_FOUND, "get_booking", booking_id=99999)


def test_list_bookings_filters(h: EnvHarness) -> None:
    flight_id = flight(h, f"{upcoming()} AND {sold('business')} > 0")
    manifest = h.call("list_bookings", flight_id=flight_id, limit=100)
    assert len(manifest) == first(h, "SELECT COUNT(*) FROM bookings WHERE flight_id = ?", flight_id)
    business = h.call("list_bookings", flight_id=flight_id, cabin="business", status="confirmed", limit=100)
    expected = (
        "SELECT COUNT(*) FROM bookings WHERE flight_id = ? AND cabin = 'business' AND status = 'confirmed'"
    )
    assert business and len(business) == first(h, expected, flight_id)
    assert all(b["cabin"] == "business" and b["status"] == "confirmed" for b in business)
    passenger_id = manifest[0]["passenger_id"]
    own = h.call("list_bookings", passenger_id=passenger_id)
    assert len(own) == first(h, "SELECT COUNT(*) FROM bookings WHERE passenger_id = ?", passenger_id)
    assert all(b["passenger_id"] == passenger_id for b in own)
    assert len(h.call("list_bookings", status="flown", limit=7)) == 7
    fails(h, ErrorCode.NOT_FOUND, "list_bookings", passenger_id=99999)
    fails(h, ErrorCode.NOT_FOUND, "list_bookings", flight_id=99999)


def test_route_report_totals_match_the_bookings(h: EnvHarness) -> None:
    report = h.call("route_report", date_from="2026-06-07", date_to="2026-06-14")
    in_range = "f.status <> 'cancelled' AND f.departs_at >= '2026-06-07' AND f.departs_at < '2026-06-15'"
    revenue = first(
        h,
        f"SELECT SUM(b.price) {WITH_FLIGHT} WHERE b.status IN {HELD} AND {in_range}",
    )
    assert report["totals"]["revenue"] == pytest.approx(revenue)
    assert report["totals"]["flights"] == first(h, f"SELECT COUNT(*) FROM flights f WHERE {in_range}")
    revenues = [r["revenue"] for r in report["routes"]]
    assert revenues == sorted(revenues, reverse=True)
    assert all(0 < r["load_factor_pct"] <= 100 for r in report["routes"] if r["flights"])

    from_sea = h.call("route_report", origin="SEA")["routes"]
    assert from_sea and all(r["route"].startswith("SEA-") for r in from_sea)
    fails(h, ErrorCode.VALIDATION_ERROR, "route_report", date_from="2026-06-20", date_to="2026-06-01")
    fails(h, ErrorCode.NOT_FOUND, "route_report", origin="JFK")


# --- book_flight ------------------------------------------------------------------------------------


def test_book_flight_prices_with_discount_and_credits_miles(h: EnvHarness) -> None:
    flight_id = flight(h, room("business"))
    fare, economy_fare, sold_before = first(
        h, f"SELECT business_fare, economy_fare, {sold('business')} FROM flights f WHERE f.id = ?", flight_id
    )
    passenger_id = passenger_for(h, flight_id, "platinum")
    balance = miles(h, passenger_id)

    booking = h.call(
        "book_flight", passenger_id=passenger_id, flight_id=flight_id, cabin="business", fare_type="flex"
    )
    assert booking["status"] == "confirmed" and booking["booked_at"] == "2026-06-15T12:00:00"
    assert booking["price"] == round(fare * 1.25 * 0.9, 2)
    assert booking["miles_earned"] == round(booking["price"])
    assert miles(h, passenger_id) == balance + booking["miles_earned"]
    assert h.call("get_flight", flight_id=flight_id)["seats"]["business"]["sold"] == sold_before + 1

    guest = book(h, flight_id)
    assert (guest["cabin"], guest["fare_type"], guest["price"], guest["miles_earned"]) == (
        "economy",
        "saver",
        economy_fare,
        0,
    )


def test_book_flight_errors(h: EnvHarness) -> None:
    flight_id = flight(h, room())
    passenger_id = passenger_for(h, flight_id)
    fails(h, ErrorCode.NOT_FOUND, "book_flight", passenger_id=99999, flight_id=flight_id)
    fails(h, ErrorCode.NOT_FOUND, "book_flight", passenger_id=passenger_id, flight_id=99999)
    for status in ("departed", "cancelled"):
        gone = flight(h, f"f.status = '{status}'")
        message = fails(
            h, ErrorCode.PRECONDITION_FAILED, "book_flight", passenger_id=passenger_id, flight_id=gone
        )
        assert status in message

    h.call("book_flight", passenger_id=passenger_id, flight_id=flight_id)
    message = fails(
        h, ErrorCode.CONFLICT, "book_flight", passenger_id=passenger_id, flight_id=flight_id, cabin="business"
    )
    assert f"passenger {passenger_id}" in message

    no_business = flight(h, f"{upcoming()} AND a.business_seats = 0")
    args = {"passenger_id": passenger_for(h, no_business), "flight_id": no_business, "cabin": "business"}
    assert "full" in fails(h, ErrorCode.LIMIT_EXCEEDED, "book_flight", **args)


def test_booking_fills_a_cabin_then_refuses_overbooking(h: EnvHarness) -> None:
    flight_id = flight(h, room("business"), order=free("business"))
    fill(h, flight_id, "business")
    assert h.call("get_flight", flight_id=flight_id)["seats"]["business"]["available"] == 0
    args = {"passenger_id": passenger_for(h, flight_id, "gold"), "flight_id": flight_id, "cabin": "business"}
    assert "full" in fails(h, ErrorCode.LIMIT_EXCEEDED, "book_flight", **args)
    assert (
        first(
            h,
            f"SELECT {free('business')} {WITH_AIRCRAFT} WHERE f.id = ?",
            flight_id,
        )
        == 0
    )
    assert book(h, flight_id)["cabin"] == "economy"  # the other cabin still sells


# --- cancel_booking ---------------------------------------------------------------------------------


def test_cancel_booking_refunds_and_takes_back_miles(h: EnvHarness) -> None:
    flight_id = flight(h, room())
    booking = book(h, flight_id, "gold")
    balance = miles(h, booking["passenger_id"])
    sold_before = h.call("get_flight", flight_id=flight_id)["seats"]["economy"]["sold"]
    cancelled = h.call("cancel_booking", booking_id=booking["id"])
    assert (cancelled["status"], cancelled["refund_amount"], cancelled["miles_earned"]) == (
        "cancelled",
        booking["price"],
        0,
    )
    assert miles(h, booking["passenger_id"]) == balance - booking["miles_earned"]
    assert h.call("get_flight", flight_id=flight_id)["seats"]["economy"]["sold"] == sold_before - 1
    assert "cancelled" in fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_booking", booking_id=booking["id"])


def test_cancel_booking_errors_and_refund_window(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "cancel_booking", booking_id=99999)
    flown = first(h, "SELECT id FROM bookings WHERE status = 'flown'")
    assert "flown" in fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_booking", booking_id=flown)
    soon = flight(h, f"{upcoming(within_24h=True)} AND {free('economy')} >= 2")
    saver = book(h, soon)
    assert "24 hours" in fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_booking", booking_id=saver["id"])
    flex = book(h, soon, fare_type="flex")
    assert h.call("cancel_booking", booking_id=flex["id"])["refund_amount"] == flex["price"]


# --- rebook_booking ---------------------------------------------------------------------------------


def test_rebook_moves_to_same_route_and_reprices(h: EnvHarness) -> None:
    here, there = pair(h, room(), room("economy", "g", "ga"))
    booking = book(h, here, "silver")
    balance = miles(h, booking["passenger_id"])
    new_fare = first(h, "SELECT economy_fare FROM flights WHERE id = ?", there)
    moved = h.call("rebook_booking", booking_id=booking["id"], new_flight_id=there)
    assert (moved["flight_id"], moved["price"], moved["status"]) == (there, new_fare, "confirmed")
    assert moved["fare_difference"] == round(new_fare - booking["price"], 2)
    assert miles(h, booking["passenger_id"]) == balance - booking["miles_earned"] + round(new_fare)
    assert first(h, "SELECT flight_id FROM bookings WHERE id = ?", booking["id"]) == there


def test_rebook_upgrades_cabin_on_the_same_flight(h: EnvHarness) -> None:
    flight_id = flight(h, f"{room()} AND {free('business')} > 0")
    booking = book(h, flight_id)
    fare = first(h, "SELECT business_fare FROM flights WHERE id = ?", flight_id)
    upgraded = h.call("rebook_booking", booking_id=booking["id"], new_flight_id=flight_id, cabin="business")
    assert (upgraded["flight_id"], upgraded["cabin"], upgraded["price"]) == (flight_id, "business", fare)
    assert upgraded["fare_difference"] == round(fare - booking["price"], 2) > 0


def test_rebook_errors_on_the_booking(h: EnvHarness) -> None:
    here = flight(h, room())
    booking = book(h, here)
    fails(h, ErrorCode.NOT_FOUND, "rebook_booking", booking_id=99999, new_flight_id=here)
    fails(h, ErrorCode.NOT_FOUND, "rebook_booking", booking_id=booking["id"], new_flight_id=99999)
    assert "already in economy" in fails(
        h, ErrorCode.VALIDATION_ERROR, "rebook_booking", booking_id=booking["id"], new_flight_id=here
    )
    elsewhere = flight(h, f"{room()} AND f.origin <> (SELECT origin FROM flights WHERE id = {here})")
    message = fails(
        h, ErrorCode.FORBIDDEN, "rebook_booking", booking_id=booking["id"], new_flight_id=elsewhere
    )
    assert "same route" in message
    h.call("cancel_booking", booking_id=booking["id"])
    args = {"booking_id": booking["id"], "new_flight_id": here, "cabin": "business"}
    assert "cancelled" in fails(h, ErrorCode.PRECONDITION_FAILED, "rebook_booking", **args)


def test_rebook_errors_on_the_target_flight(h: EnvHarness) -> None:
    for status in ("departed", "cancelled"):
        here, gone = pair(h, room(), f"g.status = '{status}'")
        booking = book(h, here)
        args = {"booking_id": booking["id"], "new_flight_id": gone}
        assert status in fails(h, ErrorCode.PRECONDITION_FAILED, "rebook_booking", **args)

    here, there = pair(h, room(), room("economy", "g", "ga"))
    booking = book(h, here)
    h.call("book_flight", passenger_id=booking["passenger_id"], flight_id=there)
    fails(h, ErrorCode.CONFLICT, "rebook_booking", booking_id=booking["id"], new_flight_id=there)
    moving = book(h, here, "silver", avoid=there)
    fill(h, there)  # with non-members
    assert "full" in fails(
        h, ErrorCode.LIMIT_EXCEEDED, "rebook_booking", booking_id=moving["id"], new_flight_id=there
    )
    assert first(h, "SELECT flight_id FROM bookings WHERE id = ?", moving["id"]) == here


def test_rebook_within_24_hours(h: EnvHarness) -> None:
    soon, later = pair(
        h, f"{upcoming(within_24h=True)} AND {free('economy')} >= 3", room("economy", "g", "ga")
    )
    saver = book(h, soon)
    message = fails(
        h, ErrorCode.PRECONDITION_FAILED, "rebook_booking", booking_id=saver["id"], new_flight_id=later
    )
    assert "24 hours" in message
    flex = book(h, soon, fare_type="flex")
    h.call("check_in", booking_id=flex["id"])
    message = fails(
        h, ErrorCode.PRECONDITION_FAILED, "rebook_booking", booking_id=flex["id"], new_flight_id=later
    )
    assert "checked in" in message
    other_flex = book(h, soon, fare_type="flex")
    assert h.call("rebook_booking", booking_id=other_flex["id"], new_flight_id=later)["flight_id"] == later


# --- check_in ---------------------------------------------------------------------------------------


def test_check_in_assigns_first_free_seat_or_the_chosen_one(h: EnvHarness) -> None:
    soon = flight(h, f"{upcoming(within_24h=True)} AND {free('economy')} >= 2")
    economy, business = first(
        h,
        f"SELECT a.economy_seats, a.business_seats {WITH_AIRCRAFT} WHERE f.id = ?",
        soon,
    )
    taken = {
        seat
        for (seat,) in h.query("SELECT seat FROM bookings WHERE flight_id = ? AND seat IS NOT NULL", soon)
    }
    seats = cabin_seats(Aircraft(economy_seats=economy, business_seats=business), "economy")
    free_seats = [s for s in seats if s not in taken]

    checked = h.call("check_in", booking_id=book(h, soon)["id"])
    assert (checked["status"], checked["seat"]) == ("checked_in", free_seats[0])
    chosen = h.call("check_in", booking_id=book(h, soon)["id"], seat=free_seats[-1].lower())
    assert (chosen["status"], chosen["seat"]) == ("checked_in", free_seats[-1])


def test_check_in_errors(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "check_in", booking_id=99999)
    later = book(h, flight(h, room()))
    assert "opens 24 hours" in fails(h, ErrorCode.PRECONDITION_FAILED, "check_in", booking_id=later["id"])
    checked_in, flight_id, seat = first(
        h,
        f"SELECT b.id, b.flight_id, b.seat {WITH_FLIGHT} JOIN aircraft a ON a.id = f.aircraft_id "
        f"WHERE b.status = 'checked_in' AND b.cabin = 'economy' AND {free('economy')} > 0",
    )
    assert "checked_in" in fails(h, ErrorCode.PRECONDITION_FAILED, "check_in", booking_id=checked_in)
    booking = book(h, flight_id)
    assert "already taken" in fails(h, ErrorCode.CONFLICT, "check_in", booking_id=booking["id"], seat=seat)
    for wrong in ("1A", "99Z"):  # a business seat; no such seat
        fails(h, ErrorCode.VALIDATION_ERROR, "check_in", booking_id=booking["id"], seat=wrong)
    assert first(h, "SELECT status, seat FROM bookings WHERE id = ?", booking["id"]) == ("confirmed", None)


def test_bookings_freeze_once_the_flight_has_left(h: EnvHarness) -> None:
    soon = flight(h, f"{upcoming(within_24h=True)} AND {free('economy')} >= 2")
    flex, saver = book(h, soon, fare_type="flex"), book(h, soon)
    h.query("UPDATE flights SET status = 'departed' WHERE id = ?", soon)  # as if it had just pushed back
    h.state.conn.commit()
    assert "departed" in fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_booking", booking_id=flex["id"])
    assert "departed" in fails(h, ErrorCode.PRECONDITION_FAILED, "check_in", booking_id=saver["id"])
    assert "departed" in fails(
        h, ErrorCode.PRECONDITION_FAILED, "book_flight", passenger_id=1, flight_id=soon
    )


# --- flight operations ------------------------------------------------------------------------------


def test_delay_flight(h: EnvHarness) -> None:
    flight_id = flight(h, f"{upcoming()} AND f.status = 'scheduled'")
    before = h.call("get_flight", flight_id=flight_id)
    delayed = h.call("delay_flight", flight_id=flight_id, minutes=45)
    assert (delayed["status"], delayed["delay_minutes"]) == ("delayed", before["delay_minutes"] + 45)
    assert delayed["departs_at"] > before["departs_at"] and delayed["arrives_at"] > before["arrives_at"]
    assert (
        h.call("delay_flight", flight_id=flight_id, minutes=30)["delay_minutes"]
        == before["delay_minutes"] + 75
    )
    fails(h, ErrorCode.NOT_FOUND, "delay_flight", flight_id=99999, minutes=30)
    for status in ("departed", "cancelled"):
        fails(
            h,
            ErrorCode.PRECONDITION_FAILED,
            "delay_flight",
            flight_id=flight(h, f"f.status = '{status}'"),
            minutes=30,
        )
    for minutes in (0, 721):
        fails(h, ErrorCode.VALIDATION_ERROR, "delay_flight", flight_id=flight_id, minutes=minutes)


def test_cancel_flight_refunds_every_active_booking(h: EnvHarness) -> None:
    flight_id = flight(h, f"{upcoming()} AND {sold('economy')} > 0")
    active = f"FROM bookings b WHERE b.flight_id = ? AND b.status IN {ACTIVE}"
    members = "SELECT passenger_id FROM loyalty_accounts"
    count, total = first(h, f"SELECT COUNT(*), ROUND(SUM(price), 2) {active}", flight_id)
    member, earned = first(
        h,
        f"SELECT b.passenger_id, b.miles_earned {active} AND b.passenger_id IN ({members})",
        flight_id,
    )
    balance = miles(h, member)

    result = h.call("cancel_flight", flight_id=flight_id)
    assert (result["cancelled_bookings"], result["total_refunded"]) == (count, total)
    assert result["flight"]["status"] == "cancelled" and result["flight"]["seats"]["economy"]["sold"] == 0
    assert first(h, f"SELECT COUNT(*) {active}", flight_id) == 0
    assert (
        first(h, "SELECT COUNT(*) FROM bookings WHERE flight_id = ? AND refund_amount <> price", flight_id)
        == 0
    )
    assert miles(h, member) == max(0, balance - earned)

    assert "cancelled" in fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_flight", flight_id=flight_id)
    fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_flight", flight_id=flight(h, "f.status = 'departed'"))
    fails(h, ErrorCode.NOT_FOUND, "cancel_flight", flight_id=99999)


# --- arguments and atomicity ------------------------------------------------------------------------


def test_arguments_are_validated(h: EnvHarness) -> None:
    invalid = [
        ("get_flight", {"flight_id": "not-a-number"}),  # wrong type
        ("book_flight", {"passenger_id": 1}),  # flight_id missing
        ("book_flight", {"passenger_id": 1, "flight_id": 1, "cabin": "first"}),
        ("get_booking", {"booking_id": 1, "verbose": True}),
        ("search_flights", {"date_from": "next tuesday"}),
        ("search_flights", {"limit": 500}),
    ]
    for tool, args in invalid:
        assert h.outcome(tool, **args).error_code == ErrorCode.VALIDATION_ERROR, (tool, args)


def test_failed_writes_leave_no_changes(h: EnvHarness) -> None:
    here, there = pair(h, room(), room("economy", "g", "ga"))
    holder = book(h, here, "silver", avoid=there)
    fill(h, there)  # with non-members
    before = h.state.state_hash()
    fails(
        h,
        ErrorCode.LIMIT_EXCEEDED,
        "book_flight",
        passenger_id=passenger_for(h, there, "gold"),
        flight_id=there,
    )
    fails(h, ErrorCode.LIMIT_EXCEEDED, "rebook_booking", booking_id=holder["id"], new_flight_id=there)
    fails(h, ErrorCode.CONFLICT, "book_flight", passenger_id=holder["passenger_id"], flight_id=here)
    fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_flight", flight_id=flight(h, "f.status = 'departed'"))
    fails(h, ErrorCode.VALIDATION_ERROR, "delay_flight", flight_id=here, minutes=-5)
    for tool in ("route_report", "search_flights", "list_bookings", "find_passengers"):
        h.call(tool)
    assert h.state.state_hash() == before
    h.call("delay_flight", flight_id=here, minutes=10)
    assert h.state.state_hash() != before
