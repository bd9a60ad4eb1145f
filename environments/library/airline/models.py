"""Schema of the airline: airports, aircraft, scheduled flights, passengers, loyalty accounts and bookings."""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Airport(Base):
    __tablename__ = "airports"
    code: Mapped[str] = mapped_column(String(3), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    city: Mapped[str] = mapped_column(String(60))
    country: Mapped[str] = mapped_column(String(60))


class Aircraft(Base):
    __tablename__ = "aircraft"
    id: Mapped[str] = mapped_column(String(10), primary_key=True)
    model: Mapped[str] = mapped_column(String(60))
    economy_seats: Mapped[int]
    business_seats: Mapped[int]
    in_service_since: Mapped[date]


class Flight(Base):
    __tablename__ = "flights"
    id: Mapped[int] = mapped_column(primary_key=True)
    flight_number: Mapped[str] = mapped_column(String(8))
    origin: Mapped[str] = mapped_column(ForeignKey("airports.code"))
    destination: Mapped[str] = mapped_column(ForeignKey("airports.code"))
    aircraft_id: Mapped[str] = mapped_column(ForeignKey("aircraft.id"))
    departs_at: Mapped[datetime]
    arrives_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(12))
    delay_minutes: Mapped[int] = mapped_column(default=0)
    economy_fare: Mapped[float]
    business_fare: Mapped[float]


class Passenger(Base):
    __tablename__ = "passengers"
    id: Mapped[int] = mapped_column(primary_key=True)
    first_name: Mapped[str] = mapped_column(String(40))
    last_name: Mapped[str] = mapped_column(String(40))
    email: Mapped[str] = mapped_column(String(120), unique=True)
    date_of_birth: Mapped[date]


class LoyaltyAccount(Base):
    __tablename__ = "loyalty_accounts"
    id: Mapped[str] = mapped_column(String(12), primary_key=True)
    passenger_id: Mapped[int] = mapped_column(ForeignKey("passengers.id"), unique=True)
    tier: Mapped[str] = mapped_column(String(10))
    miles_balance: Mapped[int]
    enrolled_on: Mapped[date]


class Booking(Base):
    __tablename__ = "bookings"
    id: Mapped[int] = mapped_column(primary_key=True)
    passenger_id: Mapped[int] = mapped_column(ForeignKey("passengers.id"))
    flight_id: Mapped[int] = mapped_column(ForeignKey("flights.id"))
    cabin: Mapped[str] = mapped_column(String(10))
    fare_type: Mapped[str] = mapped_column(String(6))
    price: Mapped[float]
    status: Mapped[str] = mapped_column(String(12))
    seat: Mapped[str | None] = mapped_column(String(4))
    miles_earned: Mapped[int] = mapped_column(default=0)
    refund_amount: Mapped[float] = mapped_column(default=0.0)
    booked_at: Mapped[datetime]
