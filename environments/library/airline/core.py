"""The environment object, the simulated clock and the fare and seating policy shared by seed and tools."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from environments.sdk import Environment

from .models import Aircraft, Base, Flight

NOW = datetime(2026, 6, 15, 12, 0)
"""The simulated current time; every date rule is evaluated against it."""

env = Environment(
    "airline",
    theme="airline booking and flight operations",
    category="travel",
    description=(
        "Aurora Air, a West Coast regional airline: search flights, manage passengers and their bookings "
        "(book, cancel, rebook, check in) and run flight operations (delays, cancellations, route reports). "
        f"The current time is {NOW:%Y-%m-%d %H:%M}."
    ),
    base=Base,
    version="1",
)


Cabin = Literal["economy", "business"]
FareType = Literal["saver", "flex"]
Tier = Literal["silver", "gold", "platinum"]

CABINS: tuple[Cabin, ...] = ("economy", "business")
ACTIVE_STATUSES = ("confirmed", "checked_in")
"""Booking statuses that can still be changed or cancelled."""
HELD_STATUSES = (*ACTIVE_STATUSES, "flown")
"""Booking statuses that occupy a seat."""
REFUND_CUTOFF = timedelta(hours=24)
"""Saver fares are refundable only up to this long before departure; check-in opens at the same time."""
FLEX_SURCHARGE = 0.25
TIER_DISCOUNT: dict[str, float] = {"silver": 0.0, "gold": 0.05, "platinum": 0.10}
_SEAT_LAYOUT: dict[str, tuple[int, str]] = {"business": (1, "ACD"), "economy": (10, "ABCD")}


def fare_price(flight: Flight, cabin: str, fare_type: str, tier: str | None) -> float:
    """Ticket price: the flight's cabin fare, plus the flex surcharge, minus the loyalty tier discount."""
    base = flight.business_fare if cabin == "business" else flight.economy_fare
    surcharge = 1 + FLEX_SURCHARGE if fare_type == "flex" else 1.0
    return round(base * surcharge * (1 - TIER_DISCOUNT.get(tier or "", 0.0)), 2)


def miles_for(price: float, tier: str | None) -> int:
    """Loyalty miles a ticket earns: one per dollar, for loyalty members only."""
    return round(price) if tier else 0


def cabin_seats(aircraft: Aircraft, cabin: str) -> list[str]:
    """Seat labels of a cabin in boarding order, e.g. 1A, 1C, 1D, 2A... for business."""
    first_row, letters = _SEAT_LAYOUT[cabin]
    capacity = aircraft.business_seats if cabin == "business" else aircraft.economy_seats
    return [f"{first_row + i // len(letters)}{letters[i % len(letters)]}" for i in range(capacity)]
