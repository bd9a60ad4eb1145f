"""Tools of the library environment: catalogue and member reads, circulation writes, reports."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import Field
from sqlalchemy import Select, and_, case, func, select
from sqlalchemy.orm import Session, contains_eager, joinedload, selectinload

from environments.sdk import (
    Conflict,
    Forbidden,
    LimitExceeded,
    PreconditionFailed,
    orm_to_dict,
)
from environments.sdk.helpers import check_range, get_or_raise

from .core import (
    ACTIVE_HOLD,
    DAMAGE_FEE,
    FINE_BLOCK_THRESHOLD,
    LOAN_DAYS,
    MAX_ACTIVE_HOLDS,
    MAX_ACTIVE_LOANS,
    MAX_RENEWALS,
    RENEWAL_DAYS,
    TODAY,
    Genre,
    env,
    overdue_fine,
)
from .models import Book, Branch, Copy, Fine, Hold, Loan, Member

Id = Annotated[int, Field(ge=1)]
Limit = Annotated[int, Field(ge=1, le=100)]


def _count(db: Session, query: Select[Any]) -> int:
    return db.scalar(select(func.count()).select_from(query.subquery())) or 0


def _active_loans(member_id: int) -> Select[Any]:
    return select(Loan).where(Loan.member_id == member_id, Loan.returned_on.is_(None))


def _active_holds(member_id: int) -> Select[Any]:
    return select(Hold).where(Hold.member_id == member_id, Hold.status.in_(ACTIVE_HOLD))


def _unpaid_total(db: Session, member_id: int) -> float:
    total = db.scalar(
        select(func.sum(Fine.amount)).where(Fine.member_id == member_id, Fine.paid_on.is_(None))
    )
    return round(total or 0.0, 2)


def _borrowing_block(member: Member, unpaid: float) -> str | None:
    """Why ``member``, who owes ``unpaid`` in fines, may not borrow or place holds right now, or None."""
    if member.expires_on < TODAY:
        return f"the membership of member {member.id} ({member.name}) expired on {member.expires_on}"
    if unpaid > FINE_BLOCK_THRESHOLD:
        limit = f"{FINE_BLOCK_THRESHOLD:.2f}"
        return f"member {member.id} ({member.name}) owes {unpaid:.2f} in unpaid fines (limit {limit})"
    return None


def _ensure_can_borrow(db: Session, member: Member) -> None:
    reason = _borrowing_block(member, _unpaid_total(db, member.id))
    if reason is not None:
        raise Forbidden(reason)


def _days_overdue(loan: Loan) -> int:
    return max(((loan.returned_on or TODAY) - loan.due_on).days, 0)


# Loads what ``_loan_view`` reads along with the loans (to be used on a query already joined to Copy).
_LOAN_VIEW_LOAD = contains_eager(Loan.copy).joinedload(Copy.book)


def _loan_view(loan: Loan) -> dict[str, Any]:
    return orm_to_dict(loan) | {
        "book_id": loan.copy.book_id,
        "title": loan.copy.book.title,
        "branch_id": loan.copy.branch_id,
        "days_overdue": _days_overdue(loan),
    }


def _queue_positions(db: Session, holds: list[Hold]) -> dict[int, int]:
    """1-based place of every waiting hold on the books of ``holds`` in its book's queue (oldest first)."""
    books = {hold.book_id for hold in holds if hold.status == "waiting"}
    if not books:
        return {}
    place = func.row_number().over(partition_by=Hold.book_id, order_by=(Hold.placed_on, Hold.id))
    rows = db.execute(select(Hold.id, place).where(Hold.book_id.in_(books), Hold.status == "waiting"))
    return dict(rows.tuples().all())


def _hold_views(db: Session, holds: list[Hold]) -> list[dict[str, Any]]:
    """Each hold with its book's title and, if waiting, its place in the book's queue (else None)."""
    positions = _queue_positions(db, holds)
    return [
        orm_to_dict(hold) | {"title": hold.book.title, "queue_position": positions.get(hold.id)}
        for hold in holds
    ]


def _release_copy(db: Session, copy: Copy) -> Hold | None:
    """Reserve a copy that came back for the oldest waiting hold on its book, else shelve it."""
    waiting = db.scalar(
        select(Hold)
        .where(Hold.book_id == copy.book_id, Hold.status == "waiting")
        .order_by(Hold.placed_on, Hold.id)
        .limit(1)
    )
    if waiting is None:
        copy.status = "available"
    else:
        waiting.status, waiting.copy_id, copy.status = "ready", copy.id, "on_hold"
    return waiting


@env.tool
def search_books(
    db: Session,
    title: str | None = None,
    author: str | None = None,
    genre: Genre | None = None,
    year_from: int | None = None,
    year_to: int | None = None,
    branch_id: str | None = None,
    available_only: bool = False,
    limit: Limit = 20,
) -> list[dict]:
    """Search the catalogue; results are ordered by title and carry copy counts.

    Args:
        title: Case-insensitive part of the title.
        author: Case-insensitive part of the author's name.
        genre: Only books of this genre.
        year_from: Only books first published in or after this year.
        year_to: Only books first published in or before this year.
        branch_id: Count copies at this branch only (e.g. "CEN").
        available_only: Only books with at least one copy on the shelf (at the branch, if given).
        limit: Maximum number of books returned.
    """
    check_range(year_from, year_to, "year_from", "year_to")
    copy_join = Copy.book_id == Book.id
    if branch_id is not None:
        get_or_raise(db, Branch, branch_id)
        copy_join = and_(copy_join, Copy.branch_id == branch_id)
    available = func.coalesce(func.sum(case((Copy.status == "available", 1), else_=0)), 0)
    query = select(Book, func.count(Copy.id), available).outerjoin(Copy, copy_join).group_by(Book.id)
    if title:
        query = query.where(Book.title.ilike(f"%{title}%"))
    if author:
        query = query.where(Book.author.ilike(f"%{author}%"))
    if genre:
        query = query.where(Book.genre == genre)
    if year_from is not None:
        query = query.where(Book.year >= year_from)
    if year_to is not None:
        query = query.where(Book.year <= year_to)
    if available_only:
        query = query.having(available > 0)
    rows = db.execute(query.order_by(Book.title, Book.id).limit(limit))
    return [orm_to_dict(book) | {"copies": total, "available_copies": free} for book, total, free in rows]


@env.tool
def get_book(db: Session, book_id: Id) -> dict:
    """A book with every copy (branch, status, due date when on loan) and the length of its hold queue.

    Args:
        book_id: The book's id.
    """
    book = get_or_raise(db, Book, book_id)
    rows = db.execute(
        select(Copy, Loan.due_on)
        .outerjoin(Loan, and_(Loan.copy_id == Copy.id, Loan.returned_on.is_(None)))
        .where(Copy.book_id == book_id)
        .order_by(Copy.branch_id, Copy.id)
    )
    copies = [
        {"copy_id": c.id, "branch_id": c.branch_id, "status": c.status, "due_on": due} for c, due in rows
    ]
    waiting = _count(db, select(Hold).where(Hold.book_id == book_id, Hold.status == "waiting"))
    return orm_to_dict(book) | {"copies": copies, "waiting_holds": waiting}


@env.tool
def find_members(
    db: Session,
    name: str | None = None,
    email: str | None = None,
    city: str | None = None,
    limit: Limit = 20,
) -> list[dict]:
    """Find members by name, e-mail or city, ordered by name.

    Args:
        name: Case-insensitive part of the member's name.
        email: Case-insensitive part of the e-mail address.
        city: The member's city (exact, case-insensitive).
        limit: Maximum number of members returned.
    """
    query = select(Member)
    if name:
        query = query.where(Member.name.ilike(f"%{name}%"))
    if email:
        query = query.where(Member.email.ilike(f"%{email}%"))
    if city:
        query = query.where(func.lower(Member.city) == city.lower())
    return [orm_to_dict(m) for m in db.scalars(query.order_by(Member.name, Member.id).limit(limit))]


@env.tool
def get_member(db: Session, member_id: Id) -> dict:
    """A member's account: active loans, active holds, unpaid fines and whether they may borrow now.

    Args:
        member_id: The member's id.
    """
    member = get_or_raise(db, Member, member_id)
    unpaid = db.scalars(
        select(Fine)
        .where(Fine.member_id == member_id, Fine.paid_on.is_(None))
        .order_by(Fine.issued_on, Fine.id)
    )
    unpaid_total = _unpaid_total(db, member_id)
    block = _borrowing_block(member, unpaid_total)
    loans = _active_loans(member_id).options(selectinload(Loan.copy).selectinload(Copy.book))
    holds = _active_holds(member_id).options(joinedload(Hold.book)).order_by(Hold.id)
    return orm_to_dict(member) | {
        "active_loans": [_loan_view(loan) for loan in db.scalars(loans.order_by(Loan.due_on))],
        "active_holds": _hold_views(db, list(db.scalars(holds))),
        "unpaid_fines": [orm_to_dict(fine) for fine in unpaid],
        "unpaid_total": unpaid_total,
        "can_borrow": block is None,
        "blocked_reason": block,
    }


@env.tool
def list_loans(
    db: Session,
    member_id: Id | None = None,
    branch_id: str | None = None,
    status: Literal["active", "overdue", "returned", "all"] = "active",
    limit: Limit = 50,
) -> list[dict]:
    """List loans; active and overdue ones by due date (soonest first), others newest first.

    Args:
        member_id: Only loans of this member.
        branch_id: Only loans of copies owned by this branch.
        status: active (not yet returned), overdue (active and past due), returned, or all.
        limit: Maximum number of loans returned.
    """
    query = select(Loan).join(Loan.copy).options(_LOAN_VIEW_LOAD)
    if member_id is not None:
        query = query.where(Loan.member_id == get_or_raise(db, Member, member_id).id)
    if branch_id is not None:
        query = query.where(Copy.branch_id == get_or_raise(db, Branch, branch_id).id)
    if status in ("active", "overdue"):
        query = query.where(Loan.returned_on.is_(None)).order_by(Loan.due_on, Loan.id)
        if status == "overdue":
            query = query.where(Loan.due_on < TODAY)
    else:
        if status == "returned":
            query = query.where(Loan.returned_on.is_not(None))
        query = query.order_by(Loan.loaned_on.desc(), Loan.id.desc())
    return [_loan_view(loan) for loan in db.scalars(query.limit(limit))]


@env.tool
def list_holds(
    db: Session,
    member_id: Id | None = None,
    book_id: Id | None = None,
    status: Literal["active", "waiting", "ready", "fulfilled", "cancelled", "all"] = "active",
    limit: Limit = 50,
) -> list[dict]:
    """List holds oldest first, with each waiting hold's place in its book's queue.

    Args:
        member_id: Only holds of this member.
        book_id: Only holds on this book.
        status: active (waiting or ready), one specific status, or all.
        limit: Maximum number of holds returned.
    """
    query = select(Hold).options(joinedload(Hold.book))
    if member_id is not None:
        query = query.where(Hold.member_id == get_or_raise(db, Member, member_id).id)
    if book_id is not None:
        query = query.where(Hold.book_id == get_or_raise(db, Book, book_id).id)
    if status == "active":
        query = query.where(Hold.status.in_(ACTIVE_HOLD))
    elif status != "all":
        query = query.where(Hold.status == status)
    return _hold_views(db, list(db.scalars(query.order_by(Hold.placed_on, Hold.id).limit(limit))))


@env.tool
def branch_report(db: Session, branch_id: str | None = None) -> list[dict]:
    """Per-branch circulation figures: copies by status, active and overdue loans, waiting holds for pickup.

    Args:
        branch_id: Report on this branch only (e.g. "CEN"); all branches when omitted.
    """
    branches = (
        [get_or_raise(db, Branch, branch_id)]
        if branch_id is not None
        else list(db.scalars(select(Branch).order_by(Branch.id)))
    )
    by_status: dict[str, dict[str, int]] = {}
    for branch, status, count in db.execute(
        select(Copy.branch_id, Copy.status, func.count()).group_by(Copy.branch_id, Copy.status)
    ):
        by_status.setdefault(branch, {})[status] = count
    overdue = func.sum(case((Loan.due_on < TODAY, 1), else_=0))
    loans = {
        branch: (active, late)
        for branch, active, late in db.execute(
            select(Copy.branch_id, func.count(), overdue)
            .join(Loan, Loan.copy_id == Copy.id)
            .where(Loan.returned_on.is_(None))
            .group_by(Copy.branch_id)
        )
    }
    waiting = dict(
        db.execute(
            select(Hold.pickup_branch_id, func.count())
            .where(Hold.status == "waiting")
            .group_by(Hold.pickup_branch_id)
        ).all()
    )
    return [
        {
            "branch_id": b.id,
            "name": b.name,
            "city": b.city,
            "copies": sum(by_status.get(b.id, {}).values()),
            "copies_by_status": by_status.get(b.id, {}),
            "active_loans": loans.get(b.id, (0, 0))[0],
            "overdue_loans": loans.get(b.id, (0, 0))[1],
            "waiting_holds": waiting.get(b.id, 0),
        }
        for b in branches
    ]


@env.tool(mutates=True)
def checkout_copy(db: Session, member_id: Id, copy_id: Id) -> dict:
    """Lend a copy to a member for 21 days; a hold the member has on the book is fulfilled.

    Members with an expired card or more than 10.00 of unpaid fines may not borrow, and nobody may
    have more than 5 active loans. A copy reserved for another member's hold cannot be lent.

    Args:
        member_id: The borrowing member's id.
        copy_id: The copy's id (its barcode).
    """
    member = get_or_raise(db, Member, member_id)
    copy = get_or_raise(db, Copy, copy_id)
    _ensure_can_borrow(db, member)
    hold = db.scalar(_active_holds(member_id).where(Hold.book_id == copy.book_id))
    if copy.status == "on_loan":
        raise Conflict(f"copy {copy_id} is already on loan")
    if copy.status == "on_hold" and (hold is None or hold.copy_id != copy_id):
        raise Conflict(f"copy {copy_id} is reserved for another member's hold")
    if copy.status not in ("available", "on_hold"):
        raise PreconditionFailed(f"copy {copy_id} cannot be lent: its status is {copy.status}")
    loan = Loan(
        copy_id=copy_id, member_id=member_id, loaned_on=TODAY, due_on=TODAY + timedelta(days=LOAN_DAYS)
    )
    db.add(loan)
    copy.status = "on_loan"
    # Counted with the new loan in place; raising here rolls the whole call back.
    active = _count(db, _active_loans(member_id))
    if active > MAX_ACTIVE_LOANS:
        raise LimitExceeded(
            f"member {member_id} already has {active - 1} active loans (maximum {MAX_ACTIVE_LOANS})"
        )
    if hold is not None:
        reserved = hold.copy
        hold.status, hold.copy_id = "fulfilled", copy_id
        if reserved is not None and reserved.id != copy_id:
            _release_copy(db, reserved)
    db.flush()
    return _loan_view(loan) | {"fulfilled_hold_id": hold.id if hold else None}


@env.tool(mutates=True)
def renew_loan(db: Session, loan_id: Id) -> dict:
    """Extend an active loan by 14 days; at most 2 renewals, none when overdue or when others await the book.

    Args:
        loan_id: The loan's id.
    """
    loan = get_or_raise(db, Loan, loan_id)
    if loan.returned_on is not None:
        raise PreconditionFailed(f"loan {loan_id} was already returned on {loan.returned_on}")
    if loan.due_on < TODAY:
        raise PreconditionFailed(
            f"loan {loan_id} has been overdue since {loan.due_on}; return the copy instead"
        )
    if loan.renewals >= MAX_RENEWALS:
        raise PreconditionFailed(
            f"loan {loan_id} was already renewed {loan.renewals} times (maximum {MAX_RENEWALS})"
        )
    book = loan.copy.book
    others = _count(
        db,
        select(Hold).where(
            Hold.book_id == book.id, Hold.status == "waiting", Hold.member_id != loan.member_id
        ),
    )
    if others:
        waiting = f"{others} other member(s) wait for book {book.id} ({book.title})"
        raise Conflict(f"loan {loan_id} cannot be renewed: {waiting}")
    loan.renewals += 1
    loan.due_on += timedelta(days=RENEWAL_DAYS)
    return _loan_view(loan)


@env.tool(mutates=True)
def return_copy(db: Session, copy_id: Id, condition: Literal["good", "damaged"] = "good") -> dict:
    """Check a copy back in. Late returns are fined 0.25 per day (at most 15.00); damaged copies go to
    repair with a 5.00 fee; otherwise the copy goes to the oldest waiting hold on its book, or the shelf.

    Args:
        copy_id: The copy's id (its barcode).
        condition: The state the copy came back in.
    """
    copy = get_or_raise(db, Copy, copy_id)
    loan = db.scalar(select(Loan).where(Loan.copy_id == copy_id, Loan.returned_on.is_(None)))
    if loan is None:
        raise PreconditionFailed(f"copy {copy_id} is not on loan (status {copy.status})")
    loan.returned_on = TODAY
    charges = []
    if days := _days_overdue(loan):
        charges.append(("overdue", overdue_fine(days)))
    hold = None
    if condition == "damaged":
        charges.append(("damaged item", DAMAGE_FEE))
        copy.status = "repair"
    else:
        hold = _release_copy(db, copy)
    fines = [
        Fine(member_id=loan.member_id, loan_id=loan.id, reason=r, amount=a, issued_on=TODAY)
        for r, a in charges
    ]
    db.add_all(fines)
    db.flush()
    return {
        "loan": _loan_view(loan),
        "copy_status": copy.status,
        "fines": [orm_to_dict(f) for f in fines],
        "ready_hold_id": hold.id if hold else None,
    }


@env.tool(mutates=True)
def place_hold(db: Session, member_id: Id, book_id: Id, pickup_branch_id: str) -> dict:
    """Join the hold queue for a book, to be picked up at a branch. At most 3 active holds per member;
    not allowed while the member may not borrow, nor when a copy is on the shelf at the pickup branch.

    Args:
        member_id: The member's id.
        book_id: The book's id.
        pickup_branch_id: Where the member will collect the copy (e.g. "CEN").
    """
    member = get_or_raise(db, Member, member_id)
    book = get_or_raise(db, Book, book_id)
    branch = get_or_raise(db, Branch, pickup_branch_id)
    _ensure_can_borrow(db, member)
    if db.scalar(_active_holds(member_id).where(Hold.book_id == book_id)) is not None:
        raise Conflict(f"member {member_id} already has an active hold on book {book_id} ({book.title})")
    borrowed = _active_loans(member_id).join(Copy, Loan.copy_id == Copy.id).where(Copy.book_id == book_id)
    if _count(db, borrowed):
        raise Conflict(f"member {member_id} is currently borrowing book {book_id} ({book.title})")
    shelf = select(Copy).where(
        Copy.book_id == book_id, Copy.branch_id == branch.id, Copy.status == "available"
    )
    if _count(db, shelf):
        raise PreconditionFailed(
            f"book {book_id} ({book.title}) is on the shelf at {branch.name}; borrow it instead"
        )
    holds = _count(db, _active_holds(member_id))
    if holds >= MAX_ACTIVE_HOLDS:
        raise LimitExceeded(
            f"member {member_id} already has {holds} active holds (maximum {MAX_ACTIVE_HOLDS})"
        )
    hold = Hold(
        book_id=book_id, member_id=member_id, pickup_branch_id=branch.id, placed_on=TODAY, status="waiting"
    )
    db.add(hold)
    db.flush()
    return _hold_views(db, [hold])[0]


@env.tool(mutates=True)
def cancel_hold(db: Session, hold_id: Id) -> dict:
    """Cancel a waiting or ready hold; a copy it reserved passes to the next waiting hold or the shelf.

    Args:
        hold_id: The hold's id.
    """
    hold = get_or_raise(db, Hold, hold_id)
    if hold.status not in ACTIVE_HOLD:
        raise PreconditionFailed(f"hold {hold_id} is already {hold.status}")
    reserved = hold.copy
    hold.status, hold.copy_id = "cancelled", None
    next_hold = _release_copy(db, reserved) if reserved is not None else None
    db.flush()
    return _hold_views(db, [hold])[0] | {
        "released_copy_id": reserved.id if reserved else None,
        "next_hold_id": next_hold.id if next_hold else None,
    }


@env.tool(mutates=True)
def pay_fine(db: Session, fine_id: Id) -> dict:
    """Record payment of a fine in full today.

    Args:
        fine_id: The fine's id.
    """
    fine = get_or_raise(db, Fine, fine_id)
    if fine.paid_on is not None:
        raise PreconditionFailed(f"fine {fine_id} was already paid on {fine.paid_on}")
    fine.paid_on = TODAY
    db.flush()
    return orm_to_dict(fine) | {"member_unpaid_total": _unpaid_total(db, fine.member_id)}
