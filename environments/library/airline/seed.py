"""Deterministic seed data: Aurora Air's network, fleet, a four-week schedule around NOW and its bookings."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta

from sqlalchemy.orm import Session

from .core import CABINS, NOW, REFUND_CUTOFF, cabin_seats, env, fare_price, miles_for
from .models import Aircraft, Airport, Booking, Flight, LoyaltyAccount, Passenger

AIRPORTS = [
    ("SEA", "Seattle-Tacoma International Airport", "Seattle", "United States"),
    ("PDX", "Portland International Airport", "Portland", "United States"),
    ("SFO", "San Francisco International Airport", "San Francisco", "United States"),
    ("LAX", "Los Angeles International Airport", "Los Angeles", "United States"),
    ("LAS", "Harry Reid International Airport", "Las Vegas", "United States"),
    ("DEN", "Denver International Airport", "Denver", "United States"),
    ("SLC", "Salt Lake City International Airport", "Salt Lake City", "United States"),
    ("BOI", "Boise Airport", "Boise", "United States"),
    ("ANC", "Ted Stevens Anchorage International Airport", "Anchorage", "United States"),
    ("YVR", "Vancouver International Airport", "Vancouver", "Canada"),
]
# (tail number, model, economy seats, business seats, in service since)
FLEET = [
    ("N601AU", "Embraer E175", 64, 12, date(2016, 3, 14)),
    ("N602AU", "Embraer E175", 64, 12, date(2016, 9, 2)),
    ("N603AU", "Embraer E175", 64, 12, date(2018, 5, 21)),
    ("N611AU", "Bombardier CRJ700", 64, 6, date(2009, 11, 7)),
    ("N612AU", "Bombardier CRJ700", 64, 6, date(2010, 6, 30)),
    ("N621AU", "ATR 42-600", 48, 0, date(2014, 4, 18)),
    ("N622AU", "ATR 42-600", 48, 0, date(2015, 8, 9)),
    ("N623AU", "ATR 42-600", 48, 0, date(2019, 2, 27)),
    ("N631AU", "Saab 340B", 34, 0, date(2001, 10, 5)),
    ("N632AU", "Saab 340B", 34, 0, date(2002, 7, 19)),
]
# (airport, airport, block minutes, economy fare, business fare): flown in both directions
ROUTES = [
    ("SEA", "PDX", 55, 119, 289),
    ("SEA", "SFO", 125, 189, 529),
    ("SEA", "ANC", 215, 259, 689),
    ("SEA", "YVR", 60, 139, 329),
    ("SEA", "BOI", 90, 149, 379),
    ("SFO", "LAX", 85, 129, 349),
    ("LAX", "LAS", 70, 99, 279),
    ("BOI", "SLC", 75, 129, 339),
    ("SLC", "DEN", 95, 139, 359),
]
FIRST_NAMES = [
    "Olivia", "Liam", "Emma", "Noah", "Ava", "Mateo", "Sophia", "Ethan", "Isabella", "Lucas", "Mia", "Aiden",
    "Harper", "Elijah", "Amelia", "James", "Chloe", "Benjamin", "Priya", "Arjun", "Mei", "Hiroshi", "Yuki",
    "Wei", "Fatima", "Omar", "Aisha", "Diego", "Camila", "Sofia", "Gabriel", "Valentina", "Nora", "Henrik",
    "Ingrid", "Tomasz", "Zofia", "Kwame", "Amara", "Connor", "Siobhan", "Rafael", "Lucia", "Daniel", "Grace",
    "Samuel", "Hannah", "Jin", "Leila", "Marcus", "Elena", "Oscar", "Beatriz", "Kenji", "Ananya", "Theo",
    "Maya", "Felix", "Zara", "Caleb", "Rosa", "Dmitri", "Imani", "Lars", "Ruth", "Tariq", "Evelyn", "Hugo",
]  # fmt: skip
LAST_NAMES = [
    "Nguyen", "Garcia", "Smith", "Johnson", "Patel", "Kim", "Chen", "Rodriguez", "Martinez", "Hernandez",
    "Lopez", "Williams", "Brown", "Davis", "Miller", "Wilson", "Anderson", "Thomas", "Taylor", "Moore",
    "Jackson", "Martin", "Lee", "Thompson", "White", "Harris", "Clark", "Lewis", "Robinson", "Walker",
    "Young", "Allen", "Wright", "Scott", "Torres", "Ramirez", "Flores", "Rivera", "Nakamura", "Tanaka",
    "Okafor", "Mensah", "Kowalski", "Novak", "Larsen", "Johansson", "Murphy", "Fischer", "Rossi", "Dubois",
    "Haddad", "Singh", "Shah", "Cohen", "Yamamoto", "Park", "Alvarez", "Sullivan", "Bergstrom", "Adeyemi",
    "Morales", "Reyes", "Gupta", "Ivanova", "Petrov", "Costa", "Silva", "Evans", "Hughes", "Kaur", "Baker",
]  # fmt: skip
EMAIL_DOMAINS = ["gmail.com", "outlook.com", "yahoo.com", "icloud.com", "proton.me", "fastmail.com"]
PASSENGER_COUNT = 600
SCHEDULE_START = date(2026, 6, 7)
SCHEDULE_DAYS = 16
ROUTE_EVERY_DAYS = 5
DELAYS_MINUTES = [20, 35, 45, 60, 90, 120]


@env.seeder
def seed(db: Session, rng: random.Random) -> None:
    """Fill the airline: airports, fleet, passengers, loyalty accounts, flights and bookings."""
    db.add_all(Airport(code=c, name=n, city=city, country=country) for c, n, city, country in AIRPORTS)
    fleet = [
        Aircraft(id=t, model=m, economy_seats=e, business_seats=b, in_service_since=s)
        for t, m, e, b, s in FLEET
    ]
    db.add_all(fleet)
    tiers = _seed_passengers(db, rng)
    flights = _seed_flights(db, rng, fleet)
    db.flush()  # the models declare no relationships, so parents are written before their children
    bookings: list[Booking] = []
    for flight in flights:
        aircraft = next(a for a in fleet if a.id == flight.aircraft_id)
        travellers = rng.sample(sorted(tiers), aircraft.economy_seats + aircraft.business_seats + 4)
        for cabin in CABINS:
            seats = cabin_seats(aircraft, cabin)
            if not seats:
                continue
            rng.shuffle(seats)
            sold = _cabin_sales(rng, flight, len(seats))
            withdrawn = rng.choice([0, 0, 1, 2])  # bookings their passengers cancelled
            for n in range(sold + withdrawn):
                pid = travellers.pop()
                bookings.append(_seed_booking(rng, flight, cabin, pid, tiers[pid], seats, n < withdrawn))
    for booking_id, booking in enumerate(bookings, start=1):
        booking.id = booking_id
    db.add_all(bookings)


def _seed_passengers(db: Session, rng: random.Random) -> dict[int, str | None]:
    """Passengers (with unique e-mails) and loyalty accounts for about half of them; returns each tier."""
    emails: set[str] = set()
    tiers: dict[int, str | None] = {}
    accounts: list[LoyaltyAccount] = []
    account_numbers = rng.sample(range(10_000_000, 100_000_000), PASSENGER_COUNT)
    for pid in range(1, PASSENGER_COUNT + 1):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        email = f"{first}.{last}@{rng.choice(EMAIL_DOMAINS)}".lower()
        if email in emails:
            email = email.replace("@", f"{pid}@")
        emails.add(email)
        born = date(1950, 1, 1) + timedelta(days=rng.randint(0, 365 * 56))
        db.add(Passenger(id=pid, first_name=first, last_name=last, email=email, date_of_birth=born))
        tiers[pid] = None
        if rng.random() < 0.55:
            tier = rng.choices(["silver", "gold", "platinum"], weights=[55, 30, 15])[0]
            miles = rng.randint(800, 40_000) * {"silver": 1, "gold": 3, "platinum": 6}[tier]
            enrolled = date(2012, 1, 1) + timedelta(days=rng.randint(0, 5200))
            accounts.append(
                LoyaltyAccount(
                    id=f"AU{account_numbers[pid - 1]}",
                    passenger_id=pid,
                    tier=tier,
                    miles_balance=miles,
                    enrolled_on=enrolled,
                )
            )
            tiers[pid] = tier
    db.flush()
    db.add_all(accounts)
    return tiers


def _seed_flights(db: Session, rng: random.Random, fleet: list[Aircraft]) -> list[Flight]:
    """Every route in both directions every ROUTE_EVERY_DAYS days; past flights departed, a few disrupted."""
    flights: list[Flight] = []
    for day in range(SCHEDULE_DAYS):
        for pair, (a, b, minutes, economy, business) in enumerate(ROUTES):
            for direction, (origin, destination) in enumerate([(a, b), (b, a)]):
                if (day + 2 * pair + direction) % ROUTE_EVERY_DAYS:
                    continue
                departs = datetime.combine(
                    SCHEDULE_START + timedelta(days=day), datetime.min.time()
                ) + timedelta(hours=rng.randint(6, 21), minutes=rng.choice([0, 15, 30, 45]))
                status, delay = _flight_status(rng, departs)
                departs += timedelta(minutes=delay)
                flight = Flight(
                    id=len(flights) + 1,
                    flight_number=f"AU{110 + 10 * pair + direction}",
                    origin=origin,
                    destination=destination,
                    aircraft_id=rng.choice([p for p in fleet if minutes <= 120 or p.business_seats]).id,
                    departs_at=departs,
                    arrives_at=departs + timedelta(minutes=minutes),
                    status=status,
                    delay_minutes=delay,
                    economy_fare=round(economy * rng.uniform(0.85, 1.35)) - 0.01,
                    business_fare=round(business * rng.uniform(0.9, 1.3)) - 0.01,
                )
                db.add(flight)
                flights.append(flight)
    return flights


def _flight_status(rng: random.Random, departs: datetime) -> tuple[str, int]:
    """Status and delay in minutes of a flight scheduled at ``departs``."""
    roll = rng.random()
    if roll < 0.05:
        return "cancelled", 0
    if departs <= NOW:
        return "departed", 0
    if roll < 0.15:
        return "delayed", rng.choice(DELAYS_MINUTES)
    return "scheduled", 0


def _cabin_sales(rng: random.Random, flight: Flight, capacity: int) -> int:
    """Seats of a cabin sold so far: flights fill up as departure nears, and some sell out."""
    days_out = (flight.departs_at - NOW).days
    low, high = (0.6, 1.0) if days_out < 0 else (0.45, 0.9) if days_out < 3 else (0.2, 0.65)
    return capacity if rng.random() < 0.15 else round(capacity * rng.uniform(low, high))


def _seed_booking(
    rng: random.Random,
    flight: Flight,
    cabin: str,
    passenger_id: int,
    tier: str | None,
    seats: list[str],
    withdrawn: bool,
) -> Booking:
    """A booking consistent with its flight: flown, checked in, confirmed, or (withdrawn by the passenger
    or on a cancelled flight) cancelled with a full refund."""
    fare_type = "flex" if rng.random() < 0.25 else "saver"
    price = fare_price(flight, cabin, fare_type, tier)
    booked_at = min(
        flight.departs_at - timedelta(days=rng.randint(1, 75), hours=rng.randint(0, 23)),
        NOW - timedelta(hours=rng.randint(2, 72)),
    )
    booking = Booking(
        passenger_id=passenger_id,
        flight_id=flight.id,
        cabin=cabin,
        fare_type=fare_type,
        price=price,
        status="confirmed",
        seat=None,
        miles_earned=miles_for(price, tier),
        refund_amount=0.0,
        booked_at=booked_at,
    )
    if flight.status == "cancelled" or withdrawn:
        booking.status, booking.refund_amount, booking.miles_earned = "cancelled", price, 0
    elif flight.status == "departed":
        booking.status, booking.seat = "flown", seats.pop()
    elif flight.departs_at - NOW <= REFUND_CUTOFF and rng.random() < 0.6:
        booking.status, booking.seat = "checked_in", seats.pop()
    return booking
