"""Schema of the library environment: branches, catalogue, copies, members, loans, holds and fines."""

from __future__ import annotations

from datetime import date

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class Branch(Base):
    __tablename__ = "branches"
    id: Mapped[str] = mapped_column(String(3), primary_key=True)
    name: Mapped[str] = mapped_column(String(80), unique=True)
    city: Mapped[str] = mapped_column(String(60))
    address: Mapped[str] = mapped_column(String(120))
    phone: Mapped[str] = mapped_column(String(20))


class Book(Base):
    __tablename__ = "books"
    id: Mapped[int] = mapped_column(primary_key=True)
    isbn: Mapped[str] = mapped_column(String(13), unique=True)
    title: Mapped[str] = mapped_column(String(200))
    author: Mapped[str] = mapped_column(String(120))
    genre: Mapped[str] = mapped_column(String(30))
    year: Mapped[int]
    pages: Mapped[int]


class Copy(Base):
    """One physical item (its id is the barcode); status: available, on_loan, on_hold, repair or lost."""

    __tablename__ = "copies"
    id: Mapped[int] = mapped_column(primary_key=True)
    book_id: Mapped[int] = mapped_column(ForeignKey("books.id"))
    branch_id: Mapped[str] = mapped_column(ForeignKey("branches.id"))
    status: Mapped[str] = mapped_column(String(20), default="available")
    acquired_on: Mapped[date]
    book: Mapped[Book] = relationship()


class Member(Base):
    __tablename__ = "members"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(80))
    email: Mapped[str] = mapped_column(String(120), unique=True)
    city: Mapped[str] = mapped_column(String(60))
    home_branch_id: Mapped[str] = mapped_column(ForeignKey("branches.id"))
    joined_on: Mapped[date]
    expires_on: Mapped[date]


class Loan(Base):
    """A copy lent to a member; active while ``returned_on`` is null."""

    __tablename__ = "loans"
    id: Mapped[int] = mapped_column(primary_key=True)
    copy_id: Mapped[int] = mapped_column(ForeignKey("copies.id"))
    member_id: Mapped[int] = mapped_column(ForeignKey("members.id"))
    loaned_on: Mapped[date]
    due_on: Mapped[date]
    returned_on: Mapped[date | None]
    renewals: Mapped[int] = mapped_column(default=0)
    copy: Mapped[Copy] = relationship()


class Hold(Base):
    """A member's request for a book; status: waiting, ready (a copy is reserved), fulfilled or cancelled."""

    __tablename__ = "holds"
    id: Mapped[int] = mapped_column(primary_key=True)
    book_id: Mapped[int] = mapped_column(ForeignKey("books.id"))
    member_id: Mapped[int] = mapped_column(ForeignKey("members.id"))
    pickup_branch_id: Mapped[str] = mapped_column(ForeignKey("branches.id"))
    placed_on: Mapped[date]
    status: Mapped[str] = mapped_column(String(20), default="waiting")
    copy_id: Mapped[int | None] = mapped_column(ForeignKey("copies.id"))
    book: Mapped[Book] = relationship()
    copy: Mapped[Copy | None] = relationship()


class Fine(Base):
    """A charge to a member (overdue, damaged item or lost item); unpaid while ``paid_on`` is null."""

    __tablename__ = "fines"
    id: Mapped[int] = mapped_column(primary_key=True)
    member_id: Mapped[int] = mapped_column(ForeignKey("members.id"))
    loan_id: Mapped[int | None] = mapped_column(ForeignKey("loans.id"))
    reason: Mapped[str] = mapped_column(String(20))
    amount: Mapped[float]
    issued_on: Mapped[date]
    paid_on: Mapped[date | None]
