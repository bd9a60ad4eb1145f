"""Schema of the banking environment: customers, accounts, payees, cards and transactions.

Money is stored as integer cents in columns ending in ``_cents``; tools expose it as ``Decimal``.
"""

from __future__ import annotations

from datetime import date

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(primary_key=True)
    first_name: Mapped[str] = mapped_column(String(40))
    last_name: Mapped[str] = mapped_column(String(40))
    email: Mapped[str] = mapped_column(String(120), unique=True)
    phone: Mapped[str] = mapped_column(String(20))
    city: Mapped[str] = mapped_column(String(40))
    country: Mapped[str] = mapped_column(String(2))
    date_of_birth: Mapped[date]
    customer_since: Mapped[date]
    tier: Mapped[str] = mapped_column(String(10))
    kyc_status: Mapped[str] = mapped_column(String(10))
    daily_transfer_limit_cents: Mapped[int]


class Account(Base):
    __tablename__ = "accounts"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"), index=True)
    iban: Mapped[str] = mapped_column(String(34), unique=True)
    type: Mapped[str] = mapped_column(String(10))
    currency: Mapped[str] = mapped_column(String(3))
    nickname: Mapped[str | None] = mapped_column(String(40))
    balance_cents: Mapped[int]
    overdraft_limit_cents: Mapped[int]
    status: Mapped[str] = mapped_column(String(10))
    opened_on: Mapped[date]
    closed_on: Mapped[date | None]


class Payee(Base):
    __tablename__ = "payees"
    __table_args__ = (UniqueConstraint("customer_id", "iban"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"), index=True)
    name: Mapped[str] = mapped_column(String(80))
    iban: Mapped[str] = mapped_column(String(34))
    bank_name: Mapped[str] = mapped_column(String(60))
    category: Mapped[str] = mapped_column(String(20))
    currency: Mapped[str] = mapped_column(String(3))
    added_on: Mapped[date]


class Card(Base):
    __tablename__ = "cards"
    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"), index=True)
    last4: Mapped[str] = mapped_column(String(4))
    network: Mapped[str] = mapped_column(String(12))
    form: Mapped[str] = mapped_column(String(10))
    status: Mapped[str] = mapped_column(String(10))
    issued_on: Mapped[date]
    expires_on: Mapped[date]


class Transaction(Base):
    __tablename__ = "transactions"
    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"), index=True)
    posted_on: Mapped[date]
    kind: Mapped[str] = mapped_column(String(15))
    category: Mapped[str] = mapped_column(String(20))
    description: Mapped[str] = mapped_column(String(120))
    amount_cents: Mapped[int]
    balance_after_cents: Mapped[int]
    counterparty_account_id: Mapped[int | None] = mapped_column(ForeignKey("accounts.id"))
    payee_id: Mapped[int | None] = mapped_column(ForeignKey("payees.id"))
    card_id: Mapped[int | None] = mapped_column(ForeignKey("cards.id"))
