"""Tests of the library environment: every tool on its success path and on each of its error codes."""

from __future__ import annotations

import sqlite3
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from environments.sdk.digest import state_hash
from environments.sdk.errors import ErrorCode
from environments.sdk.state import build_seed
from environments.sdk.testing import EnvHarness, ToolCallFailed

from . import TODAY, env
from .core import DAMAGE_FEE, LOAN_DAYS, MAX_ACTIVE_HOLDS, MAX_ACTIVE_LOANS, RENEWAL_DAYS, overdue_fine
from .seed import BOOKS, BRANCHES, MEMBER_COUNT

T = TODAY.isoformat()
TABLES = ["branches", "books", "copies", "members", "loans", "holds", "fines"]
UNPAID = "COALESCE((SELECT SUM(amount) FROM fines f WHERE f.member_id = m.id AND f.paid_on IS NULL), 0)"
FREE_MEMBERS = f"""
    SELECT m.id FROM members m
    WHERE m.expires_on >= '{T}' AND {UNPAID} <= 10
      AND NOT EXISTS (SELECT 1 FROM loans l WHERE l.member_id = m.id AND l.returned_on IS NULL)
      AND NOT EXISTS (SELECT 1 FROM holds x WHERE x.member_id = m.id AND x.status IN ('waiting', 'ready'))
    ORDER BY m.id"""
WAITING_FOR_BOOK = "SELECT 1 FROM holds x WHERE x.book_id = c.book_id AND x.status = 'waiting'"
# Active, not overdue, renewable loans whose book nobody else is waiting for.
RENEWABLE = f"""
    SELECT l.id, l.due_on, c.book_id, c.branch_id FROM loans l JOIN copies c ON c.id = l.copy_id
    WHERE l.returned_on IS NULL AND l.due_on >= '{T}' AND l.renewals = 0
      AND NOT EXISTS ({WAITING_FOR_BOOK})
    ORDER BY l.id"""
# Books with no copy on any shelf: holds may be placed on them at any branch.
UNAVAILABLE_BOOKS = """
    SELECT b.id FROM books b
    WHERE NOT EXISTS (SELECT 1 FROM copies c WHERE c.book_id = b.id AND c.status = 'available')
    ORDER BY b.id"""


@pytest.fixture
def h():
    with EnvHarness(env) as harness:
        yield harness


def fails(h: EnvHarness, code: ErrorCode, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail with ``code``; return the error message."""
    with pytest.raises(ToolCallFailed) as err:
        h.call(tool, **arguments)
    assert err.value.code == code, err.value.message
    return err.value.message


def ids(h: EnvHarness, sql: str, *params: Any) -> list[Any]:
    """First column of every row of a query, which must return at least one row."""
    rows = [row[0] for row in h.query(sql, *params)]
    assert rows, f"seed has no row for: {sql}"
    return rows


def scalar(h: EnvHarness, sql: str, *params: Any) -> Any:
    return h.query(sql, *params)[0][0]


def blocked_by_fines(h: EnvHarness) -> int:
    owing = f"SELECT m.id FROM members m WHERE m.expires_on >= '{T}' AND {UNPAID} > 10 ORDER BY m.id"
    return ids(h, owing)[0]


def expired_member(h: EnvHarness) -> int:
    return ids(h, "SELECT id FROM members WHERE expires_on < ? ORDER BY id", T)[0]


def shelf_copies(h: EnvHarness) -> list[int]:
    return ids(h, "SELECT id FROM copies WHERE status = 'available' ORDER BY id")


# --- seed and schema ---------------------------------------------------------------------------------


def test_seed_has_enough_related_rows(h: EnvHarness) -> None:
    counts = {t: scalar(h, f"SELECT COUNT(*) FROM {t}") for t in TABLES}
    assert all(n > 0 for n in counts.values()), counts
    assert sum(counts.values()) >= 200
    assert (counts["branches"], counts["books"], counts["members"]) == (
        len(BRANCHES),
        len(BOOKS),
        MEMBER_COUNT,
    )
    assert scalar(h, "SELECT COUNT(*) FROM pragma_foreign_key_check") == 0


def test_seed_is_consistent(h: EnvHarness) -> None:
    # Every copy on loan has exactly one active loan, and no other copy has one.
    on_loan = "SELECT copy_id FROM loans WHERE returned_on IS NULL ORDER BY copy_id"
    assert ids(h, on_loan) == ids(h, "SELECT id FROM copies WHERE status = 'on_loan' ORDER BY id")
    most = "SELECT MAX(n) FROM (SELECT COUNT(*) n FROM loans WHERE returned_on IS NULL GROUP BY member_id)"
    assert scalar(h, most) <= MAX_ACTIVE_LOANS
    reserved = "SELECT copy_id FROM holds WHERE status = 'ready' ORDER BY copy_id"
    assert ids(h, reserved) == ids(h, "SELECT id FROM copies WHERE status = 'on_hold' ORDER BY id")
    assert scalar(h, "SELECT COUNT(*) FROM loans WHERE due_on <= loaned_on OR returned_on < loaned_on") == 0


def test_seed_is_deterministic(tmp_path: Path) -> None:
    build_seed(env, tmp_path / "a.db")
    build_seed(env, tmp_path / "b.db")
    first, second = (sqlite3.connect(tmp_path / name) for name in ("a.db", "b.db"))
    assert state_hash(first) == state_hash(second)
    assert (tmp_path / "a.db").stat().st_size < 1024 * 1024


# --- argument validation -------------------------------------------------------------------------------


def test_argument_validation(h: EnvHarness) -> None:
    fails(h, ErrorCode.VALIDATION_ERROR, "get_book", book_id="abc")
    fails(h, ErrorCode.VALIDATION_ERROR, "checkout_copy", member_id=1)
    fails(h, ErrorCode.VALIDATION_ERROR, "search_books", genre="cookery")
    fails(h, ErrorCode.VALIDATION_ERROR, "search_books", limit=0)
    fails(h, ErrorCode.VALIDATION_ERROR, "get_member", member_id=0)
    fails(h, ErrorCode.VALIDATION_ERROR, "get_member", member_id=1, include_history=True)
    fails(h, ErrorCode.VALIDATION_ERROR, "return_copy", copy_id=shelf_copies(h)[0], condition="soggy")


# --- reads ---------------------------------------------------------------------------------------------


def test_search_books_filters_and_orders(h: EnvHarness) -> None:
    books = h.call("search_books", genre="science fiction", year_from=1950, year_to=1990, limit=100)
    titles = [b["title"] for b in books]
    assert titles == sorted(titles) and "Dune" in titles and "Foundation" in titles
    assert all(b["genre"] == "science fiction" and 1950 <= b["year"] <= 1990 for b in books)
    expected = "SELECT COUNT(*) FROM books WHERE genre = 'science fiction' AND year BETWEEN 1950 AND 1990"
    assert len(books) == scalar(h, expected)

    le_guin = h.call("search_books", author="le guin")
    assert [b["title"] for b in le_guin] == ["A Wizard of Earthsea", "The Left Hand of Darkness"]
    assert [b["title"] for b in h.call("search_books", title="HOBBIT")] == ["The Hobbit"]
    assert len(h.call("search_books", limit=3)) == 3


def test_search_books_counts_copies_per_branch(h: EnvHarness) -> None:
    books = h.call("search_books", branch_id="CEN", available_only=True, limit=100)
    expected = "SELECT COUNT(DISTINCT book_id) FROM copies WHERE branch_id = 'CEN' AND status = 'available'"
    assert len(books) == scalar(h, expected) > 0
    for book in books:
        shelf = "SELECT COUNT(*) FROM copies WHERE book_id = ? AND branch_id = 'CEN' AND status = 'available'"
        assert book["available_copies"] == scalar(h, shelf, book["id"]) >= 1
        assert book["copies"] == scalar(
            h, "SELECT COUNT(*) FROM copies WHERE book_id = ? AND branch_id = 'CEN'", book["id"]
        )


def test_search_books_errors(h: EnvHarness) -> None:
    assert "after" in fails(h, ErrorCode.VALIDATION_ERROR, "search_books", year_from=2000, year_to=1990)
    assert "XYZ" in fails(h, ErrorCode.NOT_FOUND, "search_books", branch_id="XYZ")


def test_get_book(h: EnvHarness) -> None:
    book_id = scalar(h, "SELECT id FROM books WHERE title = 'Dune'")
    book = h.call("get_book", book_id=book_id)
    assert book["author"] == "Frank Herbert" and len(book["isbn"]) == 13
    assert len(book["copies"]) == scalar(h, "SELECT COUNT(*) FROM copies WHERE book_id = ?", book_id)
    assert all((c["due_on"] is not None) == (c["status"] == "on_loan") for c in book["copies"])
    waiting = "SELECT COUNT(*) FROM holds WHERE book_id = ? AND status = 'waiting'"
    queued = ids(h, "SELECT book_id FROM holds WHERE status = 'waiting' GROUP BY book_id ORDER BY book_id")[0]
    assert h.call("get_book", book_id=queued)["waiting_holds"] == scalar(h, waiting, queued) > 0
    assert "9999" in fails(h, ErrorCode.NOT_FOUND, "get_book", book_id=9999)


def test_find_members(h: EnvHarness) -> None:
    members = h.call("find_members", city="port alden", limit=100)
    assert len(members) == scalar(h, "SELECT COUNT(*) FROM members WHERE city = 'Port Alden'") > 0
    assert [m["name"] for m in members] == sorted(m["name"] for m in members)
    first = members[0]
    assert h.call("find_members", email=first["email"].upper()) == [first]
    assert all("garcia" in m["name"].lower() for m in h.call("find_members", name="GARCIA"))
    assert h.call("find_members", name="Nobody Atall") == []
    fails(h, ErrorCode.VALIDATION_ERROR, "find_members", limit=500)


def test_get_member(h: EnvHarness) -> None:
    busiest = scalar(
        h, "SELECT member_id FROM loans WHERE returned_on IS NULL GROUP BY member_id ORDER BY COUNT(*) DESC"
    )
    member = h.call("get_member", member_id=busiest)
    active = "SELECT COUNT(*) FROM loans WHERE member_id = ? AND returned_on IS NULL"
    assert len(member["active_loans"]) == scalar(h, active, busiest) >= 2
    assert [loan["due_on"] for loan in member["active_loans"]] == sorted(
        loan["due_on"] for loan in member["active_loans"]
    )

    owing = blocked_by_fines(h)
    account = h.call("get_member", member_id=owing)
    unpaid = scalar(
        h, "SELECT ROUND(SUM(amount), 2) FROM fines WHERE member_id = ? AND paid_on IS NULL", owing
    )
    assert account["unpaid_total"] == unpaid > 10
    assert len(account["unpaid_fines"]) == scalar(
        h, "SELECT COUNT(*) FROM fines WHERE member_id = ? AND paid_on IS NULL", owing
    )
    assert account["can_borrow"] is False and "unpaid fines" in account["blocked_reason"]
    assert "expired" in h.call("get_member", member_id=expired_member(h))["blocked_reason"]
    assert h.call("get_member", member_id=ids(h, FREE_MEMBERS)[0])["can_borrow"] is True
    assert "9999" in fails(h, ErrorCode.NOT_FOUND, "get_member", member_id=9999)


def test_list_loans(h: EnvHarness) -> None:
    overdue = h.call("list_loans", status="overdue", limit=100)
    assert (
        len(overdue)
        == scalar(h, "SELECT COUNT(*) FROM loans WHERE returned_on IS NULL AND due_on < ?", T)
        > 0
    )
    assert all(
        loan["days_overdue"] == (TODAY - date.fromisoformat(loan["due_on"])).days > 0 for loan in overdue
    )
    assert [loan["due_on"] for loan in overdue] == sorted(loan["due_on"] for loan in overdue)

    member_id = overdue[0]["member_id"]
    history = h.call("list_loans", member_id=member_id, status="returned", limit=100)
    assert len(history) == scalar(
        h, "SELECT COUNT(*) FROM loans WHERE member_id = ? AND returned_on IS NOT NULL", member_id
    )
    assert all(loan["member_id"] == member_id and loan["returned_on"] for loan in history)
    assert [loan["loaned_on"] for loan in history] == sorted(
        (loan["loaned_on"] for loan in history), reverse=True
    )

    at_harbor = h.call("list_loans", branch_id="HBR", status="active", limit=100)
    assert {loan["branch_id"] for loan in at_harbor} == {"HBR"}
    assert len(h.call("list_loans", status="all", limit=100)) == 100
    fails(h, ErrorCode.NOT_FOUND, "list_loans", member_id=9999)
    fails(h, ErrorCode.NOT_FOUND, "list_loans", branch_id="ZZZ")


def test_list_holds(h: EnvHarness) -> None:
    book_id = scalar(
        h, "SELECT book_id FROM holds WHERE status = 'waiting' GROUP BY book_id ORDER BY COUNT(*) DESC"
    )
    queue = h.call("list_holds", book_id=book_id, status="waiting")
    assert len(queue) >= 2
    assert [hold["queue_position"] for hold in queue] == list(range(1, len(queue) + 1))
    assert [hold["placed_on"] for hold in queue] == sorted(hold["placed_on"] for hold in queue)

    ready = h.call("list_holds", status="ready")
    assert len(ready) == scalar(h, "SELECT COUNT(*) FROM holds WHERE status = 'ready'") > 0
    assert all(hold["copy_id"] and hold["queue_position"] is None for hold in ready)
    member_id = queue[0]["member_id"]
    assert all(
        hold["member_id"] == member_id for hold in h.call("list_holds", member_id=member_id, status="all")
    )
    assert len(h.call("list_holds", status="all", limit=100)) == scalar(h, "SELECT COUNT(*) FROM holds")
    fails(h, ErrorCode.NOT_FOUND, "list_holds", member_id=9999)
    fails(h, ErrorCode.NOT_FOUND, "list_holds", book_id=9999)


def test_branch_report(h: EnvHarness) -> None:
    report = h.call("branch_report")
    assert [b["branch_id"] for b in report] == ["CEN", "EST", "HBR", "MLB", "NGT", "OAK"]
    assert sum(b["copies"] for b in report) == scalar(h, "SELECT COUNT(*) FROM copies")
    assert sum(b["active_loans"] for b in report) == scalar(
        h, "SELECT COUNT(*) FROM loans WHERE returned_on IS NULL"
    )
    overdue = "SELECT COUNT(*) FROM loans WHERE returned_on IS NULL AND due_on < ?"
    assert sum(b["overdue_loans"] for b in report) == scalar(h, overdue, T)
    assert sum(b["waiting_holds"] for b in report) == scalar(
        h, "SELECT COUNT(*) FROM holds WHERE status = 'waiting'"
    )

    (central,) = h.call("branch_report", branch_id="CEN")
    assert central == next(b for b in report if b["branch_id"] == "CEN")
    on_shelf = "SELECT COUNT(*) FROM copies WHERE branch_id = 'CEN' AND status = 'available'"
    assert central["copies_by_status"]["available"] == scalar(h, on_shelf)
    fails(h, ErrorCode.NOT_FOUND, "branch_report", branch_id="NOPE")


# --- checkout ------------------------------------------------------------------------------------------


def test_checkout_copy(h: EnvHarness) -> None:
    member_id, copy_id = ids(h, FREE_MEMBERS)[0], shelf_copies(h)[0]
    loan = h.call("checkout_copy", member_id=member_id, copy_id=copy_id)
    assert loan["loaned_on"] == T and loan["due_on"] == (TODAY + timedelta(days=LOAN_DAYS)).isoformat()
    assert loan["renewals"] == 0 and loan["returned_on"] is None and loan["fulfilled_hold_id"] is None
    assert scalar(h, "SELECT status FROM copies WHERE id = ?", copy_id) == "on_loan"
    assert [x["id"] for x in h.call("list_loans", member_id=member_id)] == [loan["id"]]


def test_checkout_copy_errors(h: EnvHarness) -> None:
    member_id, copy_id = ids(h, FREE_MEMBERS)[0], shelf_copies(h)[0]
    fails(h, ErrorCode.NOT_FOUND, "checkout_copy", member_id=9999, copy_id=copy_id)
    fails(h, ErrorCode.NOT_FOUND, "checkout_copy", member_id=member_id, copy_id=99)
    assert "expired" in fails(
        h, ErrorCode.FORBIDDEN, "checkout_copy", member_id=expired_member(h), copy_id=copy_id
    )
    assert "fines" in fails(
        h, ErrorCode.FORBIDDEN, "checkout_copy", member_id=blocked_by_fines(h), copy_id=copy_id
    )
    lent = ids(h, "SELECT id FROM copies WHERE status = 'on_loan'")[0]
    assert "on loan" in fails(h, ErrorCode.CONFLICT, "checkout_copy", member_id=member_id, copy_id=lent)
    reserved = ids(h, "SELECT id FROM copies WHERE status = 'on_hold'")[0]
    assert "reserved" in fails(h, ErrorCode.CONFLICT, "checkout_copy", member_id=member_id, copy_id=reserved)
    for status in ("repair", "lost"):
        broken = ids(h, "SELECT id FROM copies WHERE status = ?", status)[0]
        assert status in fails(
            h, ErrorCode.PRECONDITION_FAILED, "checkout_copy", member_id=member_id, copy_id=broken
        )


def test_checkout_copy_loan_limit(h: EnvHarness) -> None:
    member_id, copies = ids(h, FREE_MEMBERS)[0], shelf_copies(h)
    for copy_id in copies[:MAX_ACTIVE_LOANS]:
        h.call("checkout_copy", member_id=member_id, copy_id=copy_id)
    message = fails(
        h, ErrorCode.LIMIT_EXCEEDED, "checkout_copy", member_id=member_id, copy_id=copies[MAX_ACTIVE_LOANS]
    )
    assert f"member {member_id}" in message
    assert scalar(h, "SELECT status FROM copies WHERE id = ?", copies[MAX_ACTIVE_LOANS]) == "available"


def test_checkout_fulfils_ready_hold(h: EnvHarness) -> None:
    hold_id, member_id, copy_id = h.query(
        "SELECT id, member_id, copy_id FROM holds WHERE status = 'ready' ORDER BY id"
    )[0]
    loan = h.call("checkout_copy", member_id=member_id, copy_id=copy_id)
    assert loan["fulfilled_hold_id"] == hold_id and loan["member_id"] == member_id
    assert scalar(h, "SELECT status FROM holds WHERE id = ?", hold_id) == "fulfilled"
    assert scalar(h, "SELECT status FROM copies WHERE id = ?", copy_id) == "on_loan"


def test_checkout_other_copy_releases_reservation(h: EnvHarness) -> None:
    hold_id, member_id, reserved, other = h.query(
        "SELECT x.id, x.member_id, x.copy_id, c.id FROM holds x JOIN copies c ON c.book_id = x.book_id "
        "WHERE x.status = 'ready' AND c.status = 'available' ORDER BY x.id"
    )[0]
    loan = h.call("checkout_copy", member_id=member_id, copy_id=other)
    assert loan["fulfilled_hold_id"] == hold_id
    assert h.query("SELECT status, copy_id FROM holds WHERE id = ?", hold_id) == [("fulfilled", other)]
    assert scalar(h, "SELECT status FROM copies WHERE id = ?", reserved) == "available"


# --- renewals ------------------------------------------------------------------------------------------


def test_renew_loan_until_limit(h: EnvHarness) -> None:
    loan_id, due_on, _, _ = h.query(RENEWABLE)[0]
    first = h.call("renew_loan", loan_id=loan_id)
    assert first["renewals"] == 1
    assert first["due_on"] == (date.fromisoformat(due_on) + timedelta(days=RENEWAL_DAYS)).isoformat()
    assert h.call("renew_loan", loan_id=loan_id)["renewals"] == 2
    assert "renewed 2 times" in fails(h, ErrorCode.PRECONDITION_FAILED, "renew_loan", loan_id=loan_id)
    expected = (date.fromisoformat(due_on) + timedelta(days=2 * RENEWAL_DAYS)).isoformat()
    assert scalar(h, "SELECT due_on FROM loans WHERE id = ?", loan_id) == expected


def test_renew_loan_errors(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "renew_loan", loan_id=99999)
    returned = ids(h, "SELECT id FROM loans WHERE returned_on IS NOT NULL")[0]
    assert "returned" in fails(h, ErrorCode.PRECONDITION_FAILED, "renew_loan", loan_id=returned)
    late = ids(h, "SELECT id FROM loans WHERE returned_on IS NULL AND due_on < ?", T)[0]
    assert "overdue" in fails(h, ErrorCode.PRECONDITION_FAILED, "renew_loan", loan_id=late)


def test_renew_loan_blocked_by_waiting_hold(h: EnvHarness) -> None:
    loan_id, _, book_id, branch_id = h.query(RENEWABLE)[0]
    h.call("place_hold", member_id=ids(h, FREE_MEMBERS)[0], book_id=book_id, pickup_branch_id=branch_id)
    assert "1 other member" in fails(h, ErrorCode.CONFLICT, "renew_loan", loan_id=loan_id)
    assert scalar(h, "SELECT renewals FROM loans WHERE id = ?", loan_id) == 0


# --- returns -------------------------------------------------------------------------------------------


def test_return_copy_late_creates_fine(h: EnvHarness) -> None:
    copy_id, member_id, due_on = h.query(
        "SELECT l.copy_id, l.member_id, l.due_on FROM loans l JOIN copies c ON c.id = l.copy_id "
        "WHERE l.returned_on IS NULL AND l.due_on < ? "
        f"AND NOT EXISTS ({WAITING_FOR_BOOK}) ORDER BY l.id",
        T,
    )[0]
    result = h.call("return_copy", copy_id=copy_id)
    days = (TODAY - date.fromisoformat(due_on)).days
    assert result["loan"]["returned_on"] == T and result["loan"]["days_overdue"] == days
    assert result["copy_status"] == "available" and result["ready_hold_id"] is None
    assert [(f["reason"], f["amount"], f["member_id"]) for f in result["fines"]] == [
        ("overdue", overdue_fine(days), member_id)
    ]
    assert h.query("SELECT amount, paid_on FROM fines WHERE id = ?", result["fines"][0]["id"]) == [
        (overdue_fine(days), None)
    ]


def test_return_copy_on_time_and_damaged(h: EnvHarness) -> None:
    on_time = [row[0] for row in h.query(RENEWABLE)]
    copy_of = "SELECT copy_id FROM loans WHERE id = ?"
    result = h.call("return_copy", copy_id=scalar(h, copy_of, on_time[0]))
    assert result["fines"] == [] and result["copy_status"] == "available"
    damaged = h.call("return_copy", copy_id=scalar(h, copy_of, on_time[1]), condition="damaged")
    assert damaged["copy_status"] == "repair"
    assert [(f["reason"], f["amount"]) for f in damaged["fines"]] == [("damaged item", DAMAGE_FEE)]


def test_return_copy_goes_to_oldest_waiting_hold(h: EnvHarness) -> None:
    copy_id, book_id = h.query(
        "SELECT c.id, c.book_id FROM copies c "
        f"WHERE c.status = 'on_loan' AND EXISTS ({WAITING_FOR_BOOK}) ORDER BY c.id"
    )[0]
    oldest = h.call("list_holds", book_id=book_id, status="waiting")[0]
    result = h.call("return_copy", copy_id=copy_id)
    assert result["ready_hold_id"] == oldest["id"] and result["copy_status"] == "on_hold"
    assert h.query("SELECT status, copy_id FROM holds WHERE id = ?", oldest["id"]) == [("ready", copy_id)]
    other = ids(h, FREE_MEMBERS)[0]
    fails(h, ErrorCode.CONFLICT, "checkout_copy", member_id=other, copy_id=copy_id)


def test_return_copy_errors(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "return_copy", copy_id=12345)
    shelf = shelf_copies(h)[0]
    assert "not on loan" in fails(h, ErrorCode.PRECONDITION_FAILED, "return_copy", copy_id=shelf)


# --- holds ---------------------------------------------------------------------------------------------


def test_place_hold(h: EnvHarness) -> None:
    book_id = ids(h, UNAVAILABLE_BOOKS)[0]
    member_id = ids(h, FREE_MEMBERS)[0]
    waiting = scalar(h, "SELECT COUNT(*) FROM holds WHERE book_id = ? AND status = 'waiting'", book_id)
    hold = h.call("place_hold", member_id=member_id, book_id=book_id, pickup_branch_id="MLB")
    assert hold["status"] == "waiting" and hold["placed_on"] == T and hold["queue_position"] == waiting + 1
    assert h.call("get_member", member_id=member_id)["active_holds"][0]["id"] == hold["id"]
    assert "already has an active hold" in fails(
        h, ErrorCode.CONFLICT, "place_hold", member_id=member_id, book_id=book_id, pickup_branch_id="CEN"
    )


def test_place_hold_errors(h: EnvHarness) -> None:
    book_id, member_id = ids(h, UNAVAILABLE_BOOKS)[0], ids(h, FREE_MEMBERS)[0]
    args = {"member_id": member_id, "book_id": book_id, "pickup_branch_id": "CEN"}
    fails(h, ErrorCode.NOT_FOUND, "place_hold", **args | {"member_id": 9999})
    fails(h, ErrorCode.NOT_FOUND, "place_hold", **args | {"book_id": 9999})
    fails(h, ErrorCode.NOT_FOUND, "place_hold", **args | {"pickup_branch_id": "XXX"})
    fails(h, ErrorCode.FORBIDDEN, "place_hold", **args | {"member_id": expired_member(h)})
    fails(h, ErrorCode.FORBIDDEN, "place_hold", **args | {"member_id": blocked_by_fines(h)})
    shelf_book, shelf_branch = h.query(
        "SELECT book_id, branch_id FROM copies WHERE status = 'available' ORDER BY id"
    )[0]
    assert "on the shelf" in fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "place_hold",
        **args | {"book_id": shelf_book, "pickup_branch_id": shelf_branch},
    )
    borrower, borrowed = h.query(
        "SELECT l.member_id, c.book_id FROM loans l JOIN copies c ON c.id = l.copy_id "
        f"JOIN members m ON m.id = l.member_id WHERE l.returned_on IS NULL AND m.expires_on >= '{T}' "
        f"AND {UNPAID} <= 10 ORDER BY l.id"
    )[0]
    assert "currently borrowing" in fails(
        h, ErrorCode.CONFLICT, "place_hold", **args | {"member_id": borrower, "book_id": borrowed}
    )
    assert scalar(h, "SELECT COUNT(*) FROM holds WHERE placed_on = ?", T) == 0


def test_place_hold_limit(h: EnvHarness) -> None:
    member_id, books = ids(h, FREE_MEMBERS)[0], ids(h, UNAVAILABLE_BOOKS)
    for book_id in books[:MAX_ACTIVE_HOLDS]:
        h.call("place_hold", member_id=member_id, book_id=book_id, pickup_branch_id="OAK")
    fails(
        h,
        ErrorCode.LIMIT_EXCEEDED,
        "place_hold",
        member_id=member_id,
        book_id=books[MAX_ACTIVE_HOLDS],
        pickup_branch_id="OAK",
    )
    assert (
        scalar(h, "SELECT COUNT(*) FROM holds WHERE member_id = ? AND status = 'waiting'", member_id)
        == MAX_ACTIVE_HOLDS
    )


def test_cancel_waiting_hold_moves_queue(h: EnvHarness) -> None:
    book_id = scalar(
        h, "SELECT book_id FROM holds WHERE status = 'waiting' GROUP BY book_id ORDER BY COUNT(*) DESC"
    )
    first, second = h.call("list_holds", book_id=book_id, status="waiting")[:2]
    cancelled = h.call("cancel_hold", hold_id=first["id"])
    assert cancelled["status"] == "cancelled" and cancelled["released_copy_id"] is None
    assert h.call("list_holds", book_id=book_id, status="waiting")[0] == second | {"queue_position": 1}
    assert "already cancelled" in fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_hold", hold_id=first["id"])


def test_cancel_ready_hold_releases_copy(h: EnvHarness) -> None:
    first, second = h.query(
        "SELECT x.id, x.book_id, x.copy_id, c.branch_id FROM holds x JOIN copies c ON c.id = x.copy_id "
        "WHERE x.status = 'ready' ORDER BY x.id"
    )[:2]
    result = h.call("cancel_hold", hold_id=first[0])
    assert (
        result["released_copy_id"] == first[2]
        and result["next_hold_id"] is None
        and result["copy_id"] is None
    )
    assert scalar(h, "SELECT status FROM copies WHERE id = ?", first[2]) == "available"
    assert h.query("SELECT status, copy_id FROM holds WHERE id = ?", first[0]) == [("cancelled", None)]

    # With someone queued behind it, the copy passes to them instead of going back to the shelf.
    hold_id, book_id, copy_id, branch_id = second
    queued = h.call(
        "place_hold", member_id=ids(h, FREE_MEMBERS)[0], book_id=book_id, pickup_branch_id=branch_id
    )
    result = h.call("cancel_hold", hold_id=hold_id)
    assert result["next_hold_id"] == queued["id"]
    assert h.query("SELECT status, copy_id FROM holds WHERE id = ?", queued["id"]) == [("ready", copy_id)]
    assert scalar(h, "SELECT status FROM copies WHERE id = ?", copy_id) == "on_hold"


def test_cancel_hold_errors(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "cancel_hold", hold_id=9999)
    fulfilled = ids(h, "SELECT id FROM holds WHERE status = 'fulfilled'")[0]
    assert "fulfilled" in fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_hold", hold_id=fulfilled)


# --- fines ---------------------------------------------------------------------------------------------


def test_pay_fines_unblocks_member(h: EnvHarness) -> None:
    member_id = blocked_by_fines(h)
    fines = h.call("get_member", member_id=member_id)["unpaid_fines"]
    remaining = sum(f["amount"] for f in fines)
    for fine in fines:
        paid = h.call("pay_fine", fine_id=fine["id"])
        remaining -= fine["amount"]
        assert paid["paid_on"] == T and paid["member_unpaid_total"] == pytest.approx(remaining)
    account = h.call("get_member", member_id=member_id)
    assert account["unpaid_total"] == 0 and account["unpaid_fines"] == []
    assert account["can_borrow"] is True
    assert h.call("checkout_copy", member_id=member_id, copy_id=shelf_copies(h)[0])["member_id"] == member_id


def test_pay_fine_errors(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "pay_fine", fine_id=99999)
    paid = ids(h, "SELECT id FROM fines WHERE paid_on IS NOT NULL")[0]
    assert "already paid" in fails(h, ErrorCode.PRECONDITION_FAILED, "pay_fine", fine_id=paid)


# --- transactions --------------------------------------------------------------------------------------


def test_failed_write_is_rolled_back(h: EnvHarness) -> None:
    # checkout_copy inserts the loan before counting it against the limit, so this failure must undo a write.
    member_id, copies = ids(h, FREE_MEMBERS)[0], shelf_copies(h)
    for copy_id in copies[:MAX_ACTIVE_LOANS]:
        h.call("checkout_copy", member_id=member_id, copy_id=copy_id)
    extra = copies[MAX_ACTIVE_LOANS]
    before, loans = h.state.state_hash(), h.query("SELECT COUNT(*), MAX(id) FROM loans")[0]
    fails(h, ErrorCode.LIMIT_EXCEEDED, "checkout_copy", member_id=member_id, copy_id=extra)
    fails(
        h, ErrorCode.FORBIDDEN, "place_hold", member_id=blocked_by_fines(h), book_id=1, pickup_branch_id="CEN"
    )
    assert h.state.state_hash() == before
    assert h.query("SELECT COUNT(*), MAX(id) FROM loans")[0] == loans
    assert scalar(h, "SELECT status FROM copies WHERE id = ?", extra) == "available"
    assert len(h.state.diff()["loans"]["inserted"]) == MAX_ACTIVE_LOANS  # the successful loans are kept


def test_reads_do_not_change_state(h: EnvHarness) -> None:
    before = h.state.state_hash()
    h.call("branch_report")
    h.call("search_books", available_only=True)
    h.call("get_member", member_id=blocked_by_fines(h))
    h.call("list_holds", status="all")
    assert h.state.state_hash() == before
