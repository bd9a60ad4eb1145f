"""The airline's tools: flight and passenger look-ups, bookings, check-in and flight operations."""

from __future__ import annotations

from collections import Counter
from datetime import date, datetime, time, timedelta
from typing import Annotated, Any, Literal

from pydantic import Field
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from environments.sdk import (
    Conflict,
    Forbidden,
    LimitExceeded,
    PreconditionFailed,
    ValidationFailed,
    orm_to_dict,
)
from environments.sdk.helpers import check_range, get_or_raise

from .core import (
    ACTIVE_STATUSES,
    CABINS,
    HELD_STATUSES,
    NOW,
    REFUND_CUTOFF,
    Cabin,
    FareType,
    Tier,
    cabin_seats,
    env,
    fare_price,
    miles_for,
)
from .models import Aircraft, Airport, Booking, Flight, LoyaltyAccount, Passenger

BookingStatus = Literal["confirmed", "checked_in", "flown", "cancelled"]
FlightStatus = Literal["scheduled", "delayed", "departed", "cancelled"]
Limit = Annotated[int, Field(ge=1, le=100)]


def _seat_counts(db: Session, flight_ids: list[int]) -> Counter[tuple[int, str]]:
    """Seats held per (flight id, cabin) by bookings that are not cancelled."""
    rows = db.execute(
        select(Booking.flight_id, Booking.cabin, func.count())
        .where(Booking.flight_id.in_(flight_ids), Booking.status.in_(HELD_STATUSES))
        .group_by(Booking.flight_id, Booking.cabin)
    )
    return Counter({(flight_id, cabin): count for flight_id, cabin, count in rows})


def _flight_view(flight: Flight, aircraft: Aircraft, held: Counter[tuple[int, str]]) -> dict[str, Any]:
    """A flight with its aircraft model and the capacity, sold and free seats of each cabin."""
    seats = {}
    for cabin in CABINS:
        capacity = len(cabin_seats(aircraft, cabin))
        sold = held[(flight.id, cabin)]
        seats[cabin] = {"capacity": capacity, "sold": sold, "available": capacity - sold}
    return {**orm_to_dict(flight), "aircraft_model": aircraft.model, "seats": seats}


def _booking_view(booking: Booking, flight: Flight, passenger: Passenger) -> dict[str, Any]:
    """A booking with its passenger's name and its flight's number, route and times."""
    return {
        **orm_to_dict(booking),
        "passenger_name": f"{passenger.first_name} {passenger.last_name}",
        "flight_number": flight.flight_number,
        "route": f"{flight.origin}-{flight.destination}",
        "departs_at": flight.departs_at,
        "flight_status": flight.status,
    }


def _booking_views(db: Session, query: Select[tuple[Booking, Flight, Passenger]]) -> list[dict[str, Any]]:
    """Run a ``select(Booking, Flight, Passenger)`` query joined on its keys and render each row."""
    query = query.join(Flight, Booking.flight_id == Flight.id).join(
        Passenger, Booking.passenger_id == Passenger.id
    )
    return [_booking_view(*row) for row in db.execute(query)]


def _loyalty_accounts(db: Session, passenger_ids: set[int]) -> dict[int, LoyaltyAccount]:
    """The loyalty accounts of these passengers (those who have one), by passenger id."""
    accounts = db.scalars(select(LoyaltyAccount).where(LoyaltyAccount.passenger_id.in_(passenger_ids)))
    return {account.passenger_id: account for account in accounts}


def _loyalty_account(db: Session, passenger_id: int) -> LoyaltyAccount | None:
    return _loyalty_accounts(db, {passenger_id}).get(passenger_id)


def _adjust_miles(account: LoyaltyAccount | None, booking: Booking, miles: int) -> None:
    """Replace the miles a booking earned by ``miles`` in its passenger's loyalty account (never below 0)."""
    if account is not None:
        account.miles_balance = max(0, account.miles_balance - booking.miles_earned + miles)
    booking.miles_earned = miles


def _cancel(booking: Booking, account: LoyaltyAccount | None) -> None:
    """Cancel a booking with a full refund, freeing its seat and taking back its miles from ``account``."""
    booking.status, booking.refund_amount, booking.seat = "cancelled", booking.price, None
    _adjust_miles(account, booking, 0)


def _require_open(flight: Flight) -> None:
    """PRECONDITION_FAILED unless the flight is still ahead of us and not cancelled."""
    if flight.status in ("departed", "cancelled") or flight.departs_at <= NOW:
        raise PreconditionFailed(f"flight {flight.id} ({flight.flight_number}) is {flight.status}")


def _require_changeable(booking: Booking, flight: Flight) -> None:
    """PRECONDITION_FAILED unless the booking is active, its flight upcoming, and it is not a saver fare
    within 24 hours of departure."""
    if booking.status not in ACTIVE_STATUSES:
        raise PreconditionFailed(f"booking {booking.id} is {booking.status}")
    _require_open(flight)
    if booking.fare_type == "saver" and flight.departs_at - NOW < REFUND_CUTOFF:
        raise PreconditionFailed(
            f"booking {booking.id} is a saver fare and flight {flight.id} departs within 24 hours; "
            "it can no longer be changed or refunded"
        )


def _require_seat(db: Session, flight: Flight, cabin: str) -> None:
    """LIMIT_EXCEEDED when the cabin of the flight has no free seat left (no overbooking)."""
    capacity = len(cabin_seats(get_or_raise(db, Aircraft, flight.aircraft_id), cabin))
    if _seat_counts(db, [flight.id])[(flight.id, cabin)] >= capacity:
        raise LimitExceeded(f"the {cabin} cabin of flight {flight.id} ({flight.flight_number}) is full")


def _require_no_other_booking(db: Session, passenger_id: int, flight_id: int, booking_id: int | None) -> None:
    """CONFLICT when the passenger already holds another active booking on the flight."""
    other = db.scalar(
        select(Booking.id).where(
            Booking.passenger_id == passenger_id,
            Booking.flight_id == flight_id,
            Booking.status.in_(ACTIVE_STATUSES),
            Booking.id != booking_id,
        )
    )
    if other is not None:
        raise Conflict(f"passenger {passenger_id} already holds booking {other} on flight {flight_id}")


def _flights_query(
    db: Session, origin: str | None, destination: str | None, date_from: date | None, date_to: date | None
) -> Select[tuple[Flight, Aircraft]]:
    """Flights with their aircraft, filtered by airports (NOT_FOUND if unknown) and an inclusive date range
    (VALIDATION_ERROR if reversed), earliest departure first."""
    check_range(date_from, date_to, "date_from", "date_to")
    query = select(Flight, Aircraft).join(Aircraft, Flight.aircraft_id == Aircraft.id)
    for column, code in ((Flight.origin, origin), (Flight.destination, destination)):
        if code is not None:
            query = query.where(column == get_or_raise(db, Airport, code.upper()).code)
    if date_from:
        query = query.where(Flight.departs_at >= datetime.combine(date_from, time.min))
    if date_to:
        query = query.where(Flight.departs_at < datetime.combine(date_to + timedelta(days=1), time.min))
    return query.order_by(Flight.departs_at, Flight.id)


@env.tool
def get_flight(db: Session, flight_id: int) -> dict:
    """Get a flight by id: route, times, status, fares, aircraft and free seats per cabin.

    Args:
        flight_id: The flight's id.
    """
    flight = get_or_raise(db, Flight, flight_id)
    return _flight_view(flight, get_or_raise(db, Aircraft, flight.aircraft_id), _seat_counts(db, [flight_id]))


@env.tool
def search_flights(
    db: Session,
    origin: str | None = None,
    destination: str | None = None,
    date_from: date | None = None,
    date_to: date | None = None,
    status: FlightStatus | None = None,
    cabin: Cabin | None = None,
    min_seats: Annotated[int, Field(ge=1)] | None = None,
    max_fare: Annotated[float, Field(gt=0)] | None = None,
    limit: Limit = 20,
) -> list[dict]:
    """Search flights, earliest departure first.

    Args:
        origin: Departure airport code, e.g. SEA.
        destination: Arrival airport code, e.g. PDX.
        date_from: Earliest departure date (inclusive).
        date_to: Latest departure date (inclusive).
        status: Only flights with this status.
        cabin: Only flights with free seats in this cabin; also the cabin max_fare applies to.
        min_seats: Only flights with at least this many free seats (in `cabin`, or in either cabin).
        max_fare: Only flights whose fare in `cabin` (economy by default) is at most this, in USD.
        limit: Maximum number of flights returned.
    """
    query = _flights_query(db, origin, destination, date_from, date_to)
    if status:
        query = query.where(Flight.status == status)
    if max_fare is not None:
        query = query.where(
            (Flight.business_fare if cabin == "business" else Flight.economy_fare) <= max_fare
        )
    rows = db.execute(query).all()
    held = _seat_counts(db, [flight.id for flight, _ in rows])
    views = [_flight_view(flight, aircraft, held) for flight, aircraft in rows]
    needed = min_seats or (1 if cabin else 0)
    views = [
        v for v in views if max(v["seats"][c]["available"] for c in ([cabin] if cabin else CABINS)) >= needed
    ]
    return views[:limit]


@env.tool
def get_passenger(db: Session, passenger_id: int) -> dict:
    """Get a passenger by id with their loyalty account (or null) and all their bookings.

    Args:
        passenger_id: The passenger's id.
    """
    passenger = get_or_raise(db, Passenger, passenger_id)
    account = db.scalar(select(LoyaltyAccount).where(LoyaltyAccount.passenger_id == passenger_id))
    bookings = _booking_views(
        db,
        select(Booking, Flight, Passenger)
        .where(Booking.passenger_id == passenger_id)
        .order_by(Flight.departs_at, Booking.id),
    )
    return {
        **orm_to_dict(passenger),
        "loyalty": orm_to_dict(account) if account else None,
        "bookings": bookings,
    }


@env.tool
def find_passengers(
    db: Session,
    name: str | None = None,
    email: str | None = None,
    tier: Tier | None = None,
    limit: Limit = 20,
) -> list[dict]:
    """Find passengers by part of their name, e-mail or loyalty tier, sorted by last then first name.

    Args:
        name: Case-insensitive part of the full name, e.g. "garcia" or "Mia Chen".
        email: Case-insensitive part of the e-mail address.
        tier: Only loyalty members of this tier.
        limit: Maximum number of passengers returned.
    """
    query = select(Passenger, LoyaltyAccount).outerjoin(
        LoyaltyAccount, LoyaltyAccount.passenger_id == Passenger.id
    )
    if name:
        full_name = func.lower(Passenger.first_name + " " + Passenger.last_name)
        query = query.where(full_name.contains(name.lower().strip()))
    if email:
        query = query.where(func.lower(Passenger.email).contains(email.lower().strip()))
    if tier:
        query = query.where(LoyaltyAccount.tier == tier)
    query = query.order_by(Passenger.last_name, Passenger.first_name, Passenger.id).limit(limit)
    return [
        {
            **orm_to_dict(passenger),
            "loyalty_tier": account.tier if account else None,
            "miles_balance": account.miles_balance if account else None,
        }
        for passenger, account in db.execute(query)
    ]


@env.tool
def get_booking(db: Session, booking_id: int) -> dict:
    """Get a booking by id, with the passenger's name and the flight's number, route and departure.

    Args:
        booking_id: The booking's id.
    """
    booking = get_or_raise(db, Booking, booking_id)
    return _booking_view(
        booking,
        get_or_raise(db, Flight, booking.flight_id),
        get_or_raise(db, Passenger, booking.passenger_id),
    )


@env.tool
def list_bookings(
    db: Session,
    passenger_id: int | None = None,
    flight_id: int | None = None,
    status: BookingStatus | None = None,
    cabin: Cabin | None = None,
    limit: Limit = 50,
) -> list[dict]:
    """List bookings, by flight departure then booking id; e.g. a flight's passenger manifest.

    Args:
        passenger_id: Only bookings of this passenger.
        flight_id: Only bookings on this flight.
        status: Only bookings with this status.
        cabin: Only bookings in this cabin.
        limit: Maximum number of bookings returned.
    """
    query = select(Booking, Flight, Passenger)
    if passenger_id is not None:
        query = query.where(Booking.passenger_id == get_or_raise(db, Passenger, passenger_id).id)
    if flight_id is not None:
        query = query.where(Booking.flight_id == get_or_raise(db, Flight, flight_id).id)
    if status:
        query = query.where(Booking.status == status)
    if cabin:
        query = query.where(Booking.cabin == cabin)
    return _booking_views(db, query.order_by(Flight.departs_at, Booking.id).limit(limit))


@env.tool
def route_report(
    db: Session, date_from: date | None = None, date_to: date | None = None, origin: str | None = None
) -> dict:
    """Per-route performance of flights departing in a date range: flights, load factor, revenue, refunds.

    Load factor and revenue count operated (not cancelled) flights only; refunds count every flight.
    Routes are sorted by revenue, highest first.

    Args:
        date_from: First departure date included (default: no lower bound).
        date_to: Last departure date included (default: no upper bound).
        origin: Only routes departing from this airport code.
    """
    flights = db.execute(_flights_query(db, origin, None, date_from, date_to)).all()
    money = {
        flight_id: (revenue, refunds)
        for flight_id, revenue, refunds in db.execute(
            select(
                Booking.flight_id,
                func.sum(Booking.price).filter(Booking.status.in_(HELD_STATUSES)),
                func.sum(Booking.refund_amount),
            )
            .where(Booking.flight_id.in_([f.id for f, _ in flights]))
            .group_by(Booking.flight_id)
        )
    }
    held = _seat_counts(db, [f.id for f, _ in flights])
    routes: dict[str, dict[str, Any]] = {}
    for flight, aircraft in flights:
        row = routes.setdefault(
            f"{flight.origin}-{flight.destination}",
            {
                "flights": 0,
                "cancelled_flights": 0,
                "seats": 0,
                "seats_sold": 0,
                "revenue": 0.0,
                "refunds": 0.0,
            },
        )
        revenue, refunds = money.get(flight.id, (None, None))
        row["refunds"] += refunds or 0.0
        if flight.status == "cancelled":
            row["cancelled_flights"] += 1
            continue
        row["flights"] += 1
        row["seats"] += aircraft.economy_seats + aircraft.business_seats
        row["seats_sold"] += sum(held[(flight.id, cabin)] for cabin in CABINS)
        row["revenue"] += revenue or 0.0
    report = [
        {
            "route": route,
            **row,
            "load_factor_pct": round(100 * row["seats_sold"] / row["seats"], 1) if row["seats"] else 0.0,
            "revenue": round(row["revenue"], 2),
            "refunds": round(row["refunds"], 2),
        }
        for route, row in routes.items()
    ]
    report.sort(key=lambda r: (-r["revenue"], r["route"]))
    totals = {
        key: round(sum(r[key] for r in report), 2) for key in ("flights", "seats_sold", "revenue", "refunds")
    }
    return {"routes": report, "totals": totals}


@env.tool(mutates=True)
def book_flight(
    db: Session, passenger_id: int, flight_id: int, cabin: Cabin = "economy", fare_type: FareType = "saver"
) -> dict:
    """Book a seat for a passenger. The price is the cabin fare (+25% for flex) minus the loyalty discount
    (gold 5%, platinum 10%); loyalty members earn one mile per dollar.

    Flights that departed or were cancelled cannot be booked, a cabin cannot be overbooked, and a passenger
    can hold only one active booking per flight.

    Args:
        passenger_id: The passenger's id.
        flight_id: The flight's id.
        cabin: economy or business.
        fare_type: saver (refundable until 24h before departure) or flex (refundable until departure).
    """
    passenger = get_or_raise(db, Passenger, passenger_id)
    flight = get_or_raise(db, Flight, flight_id)
    _require_open(flight)
    _require_no_other_booking(db, passenger_id, flight_id, None)
    _require_seat(db, flight, cabin)
    account = _loyalty_account(db, passenger_id)
    tier = account.tier if account else None
    price = fare_price(flight, cabin, fare_type, tier)
    booking = Booking(
        id=(db.scalar(select(func.max(Booking.id))) or 0) + 1,
        passenger_id=passenger_id,
        flight_id=flight_id,
        cabin=cabin,
        fare_type=fare_type,
        price=price,
        status="confirmed",
        miles_earned=0,
        refund_amount=0.0,
        booked_at=NOW,
    )
    db.add(booking)
    _adjust_miles(account, booking, miles_for(price, tier))
    db.flush()
    return _booking_view(booking, flight, passenger)


@env.tool(mutates=True)
def cancel_booking(db: Session, booking_id: int) -> dict:
    """Cancel a confirmed or checked-in booking and refund its full price; earned miles are taken back.

    Saver fares can no longer be cancelled within 24 hours of departure; flex fares until departure.

    Args:
        booking_id: The booking's id.
    """
    booking = get_or_raise(db, Booking, booking_id)
    flight = get_or_raise(db, Flight, booking.flight_id)
    _require_changeable(booking, flight)
    _cancel(booking, _loyalty_account(db, booking.passenger_id))
    return _booking_view(booking, flight, get_or_raise(db, Passenger, booking.passenger_id))


@env.tool(mutates=True)
def rebook_booking(db: Session, booking_id: int, new_flight_id: int, cabin: Cabin | None = None) -> dict:
    """Move a confirmed booking to another flight of the same route (or to the other cabin of its flight).

    The booking is repriced at the new flight's fare (same fare type and loyalty discount) and the result
    carries `fare_difference` (positive: the passenger pays more; negative: refunded). Checked-in bookings
    cannot be moved; the target cabin must have a free seat.

    Args:
        booking_id: The booking's id.
        new_flight_id: The flight to move to; same origin and destination as the current one.
        cabin: The cabin on the new flight (default: the booking's current cabin).
    """
    booking = get_or_raise(db, Booking, booking_id)
    new_flight = get_or_raise(db, Flight, new_flight_id)
    old_flight = get_or_raise(db, Flight, booking.flight_id)
    cabin = cabin or booking.cabin
    if booking.status == "checked_in":
        raise PreconditionFailed(
            f"booking {booking_id} is checked in and can no longer move to another flight"
        )
    _require_changeable(booking, old_flight)
    if (new_flight.id, cabin) == (old_flight.id, booking.cabin):
        raise ValidationFailed(f"booking {booking_id} is already in {cabin} on flight {new_flight_id}")
    if (new_flight.origin, new_flight.destination) != (old_flight.origin, old_flight.destination):
        raise Forbidden(
            f"flight {new_flight_id} flies {new_flight.origin}-{new_flight.destination} but booking "
            f"{booking_id} is for {old_flight.origin}-{old_flight.destination}; "
            "rebooking is only allowed on the same route"
        )
    _require_open(new_flight)
    _require_no_other_booking(db, booking.passenger_id, new_flight_id, booking_id)
    _require_seat(db, new_flight, cabin)
    account = _loyalty_account(db, booking.passenger_id)
    tier = account.tier if account else None
    price = fare_price(new_flight, cabin, booking.fare_type, tier)
    fare_difference = round(price - booking.price, 2)
    booking.flight_id, booking.cabin, booking.price = new_flight_id, cabin, price
    _adjust_miles(account, booking, miles_for(price, tier))
    view = _booking_view(booking, new_flight, get_or_raise(db, Passenger, booking.passenger_id))
    return {**view, "fare_difference": fare_difference}


@env.tool(mutates=True)
def check_in(db: Session, booking_id: int, seat: str | None = None) -> dict:
    """Check in a confirmed booking and assign a seat. Check-in opens 24 hours before departure.

    Args:
        booking_id: The booking's id.
        seat: A free seat of the booking's cabin, e.g. "12B" (default: the first free seat).
    """
    booking = get_or_raise(db, Booking, booking_id)
    flight = get_or_raise(db, Flight, booking.flight_id)
    if booking.status != "confirmed":
        raise PreconditionFailed(
            f"booking {booking_id} is {booking.status}; only confirmed bookings can check in"
        )
    _require_open(flight)
    if flight.departs_at - NOW > REFUND_CUTOFF:
        raise PreconditionFailed(
            f"check-in for flight {flight.id} opens 24 hours before its departure "
            f"({flight.departs_at:%Y-%m-%d %H:%M})"
        )
    seats = cabin_seats(get_or_raise(db, Aircraft, flight.aircraft_id), booking.cabin)
    taken = set(
        db.scalars(select(Booking.seat).where(Booking.flight_id == flight.id, Booking.seat.is_not(None)))
    )
    if seat is None:
        seat = next(s for s in seats if s not in taken)
    seat = seat.upper().strip()
    if seat not in seats:
        raise ValidationFailed(f"seat {seat} is not in the {booking.cabin} cabin of flight {flight.id}")
    if seat in taken:
        raise Conflict(f"seat {seat} on flight {flight.id} is already taken")
    booking.status, booking.seat = "checked_in", seat
    return _booking_view(booking, flight, get_or_raise(db, Passenger, booking.passenger_id))


@env.tool(mutates=True)
def delay_flight(db: Session, flight_id: int, minutes: Annotated[int, Field(ge=5, le=720)]) -> dict:
    """Delay an upcoming flight: its departure and arrival move later and its status becomes delayed.

    Args:
        flight_id: The flight's id.
        minutes: Additional delay in minutes (5 to 720).
    """
    flight = get_or_raise(db, Flight, flight_id)
    _require_open(flight)
    shift = timedelta(minutes=minutes)
    flight.departs_at, flight.arrives_at = flight.departs_at + shift, flight.arrives_at + shift
    flight.delay_minutes += minutes
    flight.status = "delayed"
    return get_flight(db, flight_id)


@env.tool(mutates=True)
def cancel_flight(db: Session, flight_id: int) -> dict:
    """Cancel an upcoming flight: every active booking on it is cancelled with a full refund.

    Args:
        flight_id: The flight's id.
    """
    flight = get_or_raise(db, Flight, flight_id)
    _require_open(flight)
    flight.status = "cancelled"
    bookings = db.scalars(
        select(Booking).where(Booking.flight_id == flight_id, Booking.status.in_(ACTIVE_STATUSES))
    ).all()
    accounts = _loyalty_accounts(db, {booking.passenger_id for booking in bookings})
    for booking in bookings:
        _cancel(booking, accounts.get(booking.passenger_id))
    return {
        "flight": get_flight(db, flight_id),
        "cancelled_bookings": len(bookings),
        "total_refunded": round(sum(b.price for b in bookings), 2),
    }
