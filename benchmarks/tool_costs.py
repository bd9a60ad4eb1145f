"""Per-tool CPU cost of the built-in environments, with a record/compare check of every tool's output.

Usage: python benchmarks/tool_costs.py [--env NAME ...] [--repeat N] [--record PATH | --compare PATH]
                                       [--baseline PATH]

For every tool of every built-in environment, a small corpus of calls (argument sets drawn from the seed
data, plus one invalid call) runs on a freshly reset state. ``--record`` stores each call's outcome and the
state hash after it, with each tool's median time; ``--compare`` checks a later run against such a file
(byte-identical JSON output and state) and exits 1 on the first differences. The table shows the median
and p99 time per tool and, with ``--baseline``, how much faster each median is than the recorded one.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.stats import percentile  # noqa: E402
from environments.registry import builtin_names, load_environment  # noqa: E402
from environments.sdk.execution import execute_tool  # noqa: E402
from environments.sdk.state import StateStore  # noqa: E402

SAMPLES_PER_QUERY = 4
"""Rows taken (evenly spread) from each seed query of the corpus."""

# Per environment and tool: argument sets, given literally (a dict) or as a seed query whose column
# names are the argument names (a string; each sampled row is one call). The last dict is invalid.
Spec = list[dict[str, Any] | str]
CORPUS: dict[str, dict[str, Spec]] = {
    "library": {
        "search_books": [
            {},
            {"title": "the"},
            {"genre": "mystery", "available_only": True},
            {"branch_id": "CEN", "limit": 50},
            {"year_from": 1900, "year_to": 2000, "limit": 100},
            {"branch_id": "XXX"},
        ],
        "get_book": ["SELECT id AS book_id FROM books", {"book_id": 99999}],
        "find_members": [{}, {"name": "a", "limit": 100}, {"city": "Riverside"}, {"limit": 0}],
        "get_member": [
            "SELECT DISTINCT member_id FROM holds WHERE status IN ('waiting', 'ready') ORDER BY 1",
            "SELECT id AS member_id FROM members",
            {"member_id": 99999},
        ],
        "list_loans": [
            {},
            {"status": "all", "limit": 100},
            {"status": "overdue"},
            {"status": "returned", "branch_id": "CEN"},
            "SELECT DISTINCT member_id, 'all' AS status FROM loans ORDER BY 1",
            {"member_id": 99999},
        ],
        "list_holds": [
            {},
            {"status": "all", "limit": 100},
            {"status": "waiting"},
            "SELECT DISTINCT book_id, 'all' AS status FROM holds WHERE status = 'waiting' ORDER BY 1",
            "SELECT DISTINCT member_id FROM holds ORDER BY 1",
            {"status": "lost"},
        ],
        "branch_report": [{}, "SELECT id AS branch_id FROM branches", {"branch_id": "XXX"}],
        "checkout_copy": [
            "SELECT m.id AS member_id, c.id AS copy_id FROM members m JOIN copies c ON c.id % 60 + 1 = m.id"
            " WHERE c.status = 'available'",
            "SELECT member_id, copy_id FROM holds WHERE status = 'ready'",
            "SELECT id AS member_id, 31001 AS copy_id FROM members WHERE expires_on < '2026-06-15'",
            {"member_id": 1, "copy_id": 99999},
        ],
        "renew_loan": ["SELECT id AS loan_id FROM loans WHERE returned_on IS NULL", {"loan_id": 99999}],
        "return_copy": [
            "SELECT copy_id FROM loans WHERE returned_on IS NULL",
            "SELECT copy_id, 'damaged' AS condition FROM loans WHERE returned_on IS NULL AND due_on < "
            "'2026-06-15'",
            "SELECT id AS copy_id FROM copies WHERE status = 'on_hold'",
            {"copy_id": 99999},
        ],
        "place_hold": [
            "SELECT m.id AS member_id, c.book_id, 'CEN' AS pickup_branch_id FROM members m"
            " JOIN copies c ON c.id % 60 + 1 = m.id WHERE c.status = 'on_loan'",
            "SELECT member_id, book_id, pickup_branch_id FROM holds WHERE status = 'waiting'",
            {"member_id": 1, "book_id": 1, "pickup_branch_id": "XXX"},
        ],
        "cancel_hold": [
            "SELECT id AS hold_id FROM holds WHERE status = 'ready'",
            "SELECT id AS hold_id FROM holds WHERE status IN ('waiting', 'cancelled')",
            {"hold_id": 99999},
        ],
        "pay_fine": ["SELECT id AS fine_id FROM fines", {"fine_id": 99999}],
    },
    "airline": {
        "get_flight": ["SELECT id AS flight_id FROM flights", {"flight_id": 99999}],
        "search_flights": [
            {},
            {"origin": "SEA", "limit": 100},
            {"date_from": "2026-06-15", "date_to": "2026-06-20", "cabin": "business"},
            {"status": "scheduled", "min_seats": 30, "max_fare": 400},
            {"origin": "XXX"},
        ],
        "get_passenger": [
            "SELECT passenger_id FROM bookings GROUP BY 1 ORDER BY count(*) DESC, 1",
            "SELECT id AS passenger_id FROM passengers",
            {"passenger_id": 99999},
        ],
        "find_passengers": [
            {},
            {"name": "an", "limit": 100},
            {"tier": "gold"},
            {"email": "gmail"},
            {"limit": 0},
        ],
        "get_booking": ["SELECT id AS booking_id FROM bookings", {"booking_id": 99999}],
        "list_bookings": [
            {},
            {"status": "confirmed", "limit": 100},
            "SELECT id AS flight_id, 100 AS 'limit' FROM flights",
            "SELECT passenger_id FROM bookings GROUP BY 1 ORDER BY count(*) DESC, 1",
            {"flight_id": 99999},
        ],
        "route_report": [
            {},
            {"date_from": "2026-06-10", "date_to": "2026-06-18"},
            {"origin": "SEA"},
            {"date_from": "2026-06-18", "date_to": "2026-06-10"},
        ],
        "book_flight": [
            "SELECT p.id AS passenger_id, f.id AS flight_id FROM passengers p JOIN flights f"
            " ON f.id = p.id % 58 + 1 WHERE f.status = 'scheduled'",
            "SELECT p.id AS passenger_id, f.id AS flight_id, 'business' AS cabin, 'flex' AS fare_type"
            " FROM passengers p JOIN loyalty_accounts l ON l.passenger_id = p.id JOIN flights f"
            " ON f.id = p.id % 58 + 1",
            {"passenger_id": 99999, "flight_id": 1},
        ],
        "cancel_booking": [
            "SELECT id AS booking_id FROM bookings WHERE status IN ('confirmed', 'checked_in')",
            "SELECT id AS booking_id FROM bookings WHERE status IN ('flown', 'cancelled')",
            {"booking_id": 99999},
        ],
        "rebook_booking": [
            "SELECT b.id AS booking_id, f2.id AS new_flight_id FROM bookings b"
            " JOIN flights f ON f.id = b.flight_id JOIN flights f2 ON f2.origin = f.origin"
            " AND f2.destination = f.destination AND f2.id > f.id WHERE b.status = 'confirmed'"
            " AND f2.status = 'scheduled'",
            "SELECT id AS booking_id, flight_id AS new_flight_id, 'business' AS cabin FROM bookings"
            " WHERE status = 'confirmed' AND cabin = 'economy'",
            {"booking_id": 99999, "new_flight_id": 1},
        ],
        "check_in": [
            "SELECT b.id AS booking_id FROM bookings b JOIN flights f ON f.id = b.flight_id"
            " WHERE b.status = 'confirmed' AND f.departs_at < '2026-06-16 12:00'",
            "SELECT id AS booking_id, '1A' AS seat FROM bookings WHERE status = 'confirmed'",
            {"booking_id": 99999},
        ],
        "delay_flight": [
            "SELECT id AS flight_id, 45 AS minutes FROM flights",
            {"flight_id": 1, "minutes": 1},
        ],
        "cancel_flight": [
            "SELECT flight_id FROM bookings WHERE status IN ('confirmed', 'checked_in') GROUP BY 1"
            " ORDER BY count(*) DESC, 1",
            "SELECT id AS flight_id FROM flights WHERE status IN ('departed', 'cancelled')",
            {"flight_id": 99999},
        ],
    },
    "banking": {
        "search_customers": [
            {},
            {"query": "a", "limit": 100},
            {"city": "Lisbon"},
            {"tier": "premium", "kyc_status": "verified"},
            {"tier": "gold"},
        ],
        "get_customer": [
            "SELECT id AS customer_id FROM customers",
            "SELECT a.customer_id FROM transactions t JOIN accounts a ON a.id = t.account_id"
            " WHERE t.posted_on = '2026-06-15' AND t.kind IN ('payment', 'transfer_out') GROUP BY 1",
            {"customer_id": 99999},
        ],
        "get_account": ["SELECT id AS account_id FROM accounts", {"account_id": 99999}],
        "search_transactions": [
            "SELECT id AS account_id FROM accounts",
            "SELECT id AS account_id, 'card_purchase' AS kind, 100 AS 'limit' FROM accounts",
            "SELECT id AS account_id, '2026-05-01' AS date_from, '2026-05-31' AS date_to, 50 AS min_amount"
            " FROM accounts",
            {"account_id": 1001, "text": "transfer"},
            {"account_id": 99999},
        ],
        "account_statement": [
            "SELECT id AS account_id, '2026-05' AS month FROM accounts",
            "SELECT id AS account_id, '2026-06' AS month FROM accounts",
            {"account_id": 1001, "month": "2026-13"},
        ],
        "list_payees": [
            "SELECT customer_id FROM payees GROUP BY 1",
            {"customer_id": 1, "currency": "EUR"},
            {"customer_id": 99999},
        ],
        "list_cards": [
            "SELECT id AS customer_id FROM customers",
            {"customer_id": 1, "status": "active"},
            {"customer_id": 99999},
        ],
        "transfer_funds": [
            "SELECT a.id AS from_account_id, b.id AS to_account_id, '125.50' AS amount FROM accounts a"
            " JOIN accounts b ON b.currency = a.currency AND b.id = a.id + 1",
            "SELECT a.id AS from_account_id, b.id AS to_account_id, 4000 AS amount, 'rent' AS reference"
            " FROM accounts a JOIN accounts b ON b.currency = a.currency AND b.customer_id <> a.customer_id"
            " AND b.id = a.id + 2",
            {"from_account_id": 1001, "to_account_id": 1001, "amount": 1},
        ],
        "pay_payee": [
            "SELECT a.id AS account_id, p.id AS payee_id, '80.00' AS amount FROM accounts a JOIN payees p"
            " ON p.customer_id = a.customer_id AND p.currency = a.currency",
            {"account_id": 1001, "payee_id": 99999, "amount": 1},
        ],
        "add_payee": [
            "SELECT customer_id, 'Acme Utilities' AS name, iban, 'Bank of Test' AS bank_name,"
            " currency FROM accounts",
            "SELECT customer_id, name, iban, bank_name, currency FROM payees",
            {"customer_id": 1, "name": "X Y", "iban": "IE00BAD", "bank_name": "Bad", "currency": "EUR"},
        ],
        "set_card_status": [
            "SELECT id AS card_id, 'block' AS action FROM cards",
            "SELECT id AS card_id, 'unblock' AS action FROM cards WHERE status = 'blocked'",
            "SELECT id AS card_id, 'cancel' AS action FROM cards",
            {"card_id": 1, "action": "destroy"},
        ],
        "open_account": [
            "SELECT id AS customer_id, 'savings' AS account_type, 'EUR' AS currency FROM customers",
            "SELECT id AS customer_id, 'business' AS account_type, 'USD' AS currency, 'Ops' AS nickname"
            " FROM customers WHERE tier <> 'standard'",
            {"customer_id": 99999, "account_type": "savings", "currency": "EUR"},
        ],
        "close_account": [
            "SELECT id AS account_id FROM accounts",
            "SELECT id AS account_id FROM accounts WHERE balance_cents = 0",
            {"account_id": 99999},
        ],
    },
    "calendar": {
        "get_person": ["SELECT id AS person_id FROM people", {"person_id": 99999}],
        "search_people": [
            {},
            {"name": "a", "limit": 100, "include_inactive": True},
            {"department": "Legal"},
            {"office_id": "LON"},
            {"office_id": "XXX"},
        ],
        "get_room": [
            "SELECT room_id FROM meetings WHERE room_id IS NOT NULL GROUP BY 1 ORDER BY count(*) DESC, 1",
            "SELECT id AS room_id FROM rooms",
            {"room_id": 99999},
        ],
        "search_rooms": [
            {},
            {"office_id": "LON", "include_closed": True},
            {"min_capacity": 6, "equipment": ["whiteboard"], "limit": 100},
            {"free_from_utc": "2026-06-16T09:00:00", "free_until_utc": "2026-06-16T11:00:00"},
            {"free_from_utc": "2026-06-16T09:00:00"},
        ],
        "get_meeting": [
            "SELECT meeting_id FROM attendees GROUP BY 1 ORDER BY count(*) DESC, 1",
            "SELECT id AS meeting_id FROM meetings",
            {"meeting_id": 99999},
        ],
        "list_meetings": [
            {},
            {"limit": 100},
            {"status": "scheduled", "start_from_utc": "2026-06-15T00:00:00", "limit": 50},
            {"title_contains": "review"},
            "SELECT person_id, 100 AS 'limit' FROM attendees GROUP BY 1 ORDER BY count(*) DESC, 1",
            "SELECT room_id FROM meetings WHERE room_id IS NOT NULL GROUP BY 1",
            {"person_id": 99999},
        ],
        "find_free_slots": [
            "SELECT json_array(a.person_id, m.organizer_id) AS person_ids, '2026-06-17' AS day,"
            " 30 AS duration_minutes FROM attendees a JOIN meetings m ON m.id = a.meeting_id"
            " JOIN people p ON p.id = a.person_id JOIN people o ON o.id = m.organizer_id"
            " WHERE p.active AND o.active AND a.person_id <> m.organizer_id",
            "SELECT json_array(organizer_id) AS person_ids, date(start_utc) AS day, 60 AS duration_minutes,"
            " room_id FROM meetings WHERE room_id IS NOT NULL AND start_utc > '2026-06-16'",
            {"person_ids": [1], "day": "2026-06-20", "duration_minutes": 30},
        ],
        "room_utilization_report": [
            {"start_date": "2026-06-01", "end_date": "2026-06-30"},
            {"start_date": "2026-05-15", "end_date": "2026-08-14"},
            {"start_date": "2026-06-01", "end_date": "2026-06-30", "office_id": "LON"},
            {"start_date": "2026-06-30", "end_date": "2026-06-01"},
        ],
        "schedule_meeting": [
            "SELECT p.id AS organizer_id, 'Planning sync' AS title, '2026-06-17T13:00:00' AS start_utc,"
            " '2026-06-17T13:30:00' AS end_utc, json_array(p.id % 72 + 1) AS attendee_ids, r.id AS room_id"
            " FROM people p JOIN rooms r ON r.office_id = p.office_id AND r.id % 5 = p.id % 5",
            "SELECT id AS organizer_id, 'Online chat' AS title, '2026-06-18T14:00:00' AS start_utc,"
            " '2026-06-18T15:00:00' AS end_utc FROM people",
            {"organizer_id": 1, "title": "x", "start_utc": "2026-06-17T13:00:00", "end_utc": "bad"},
        ],
        "reschedule_meeting": [
            "SELECT id AS meeting_id, organizer_id AS requested_by, datetime(start_utc, '+1 day') AS"
            " new_start_utc, datetime(end_utc, '+1 day') AS new_end_utc FROM meetings"
            " WHERE status = 'scheduled' AND start_utc > '2026-06-15 12:00'",
            "SELECT id AS meeting_id, organizer_id AS requested_by, start_utc AS new_start_utc, end_utc AS"
            " new_end_utc, (room_id % 30) + 1 AS new_room_id FROM meetings WHERE room_id IS NOT NULL",
            {
                "meeting_id": 99999,
                "requested_by": 1,
                "new_start_utc": "2026-06-17T13:00:00",
                "new_end_utc": "2026-06-17T14:00:00",
            },
        ],
        "cancel_meeting": [
            "SELECT id AS meeting_id, organizer_id AS requested_by, 'Conflict' AS reason FROM meetings",
            "SELECT id AS meeting_id, organizer_id % 72 + 1 AS requested_by FROM meetings",
            {"meeting_id": 99999, "requested_by": 1},
        ],
        "invite_attendees": [
            "SELECT m.id AS meeting_id, m.organizer_id AS requested_by, json_array(p.id) AS person_ids"
            " FROM meetings m JOIN people p ON p.id = m.id % 72 + 1 WHERE m.status = 'scheduled'"
            " AND m.start_utc > '2026-06-15 12:00'",
            {"meeting_id": 99999, "requested_by": 1, "person_ids": [2]},
        ],
        "respond_to_invitation": [
            "SELECT meeting_id, person_id, 'accepted' AS response FROM attendees",
            "SELECT a.meeting_id, a.person_id, 'declined' AS response FROM attendees a JOIN meetings m"
            " ON m.id = a.meeting_id WHERE m.status = 'scheduled' AND m.start_utc > '2026-06-15 12:00'",
            {"meeting_id": 1, "person_id": 1, "response": "maybe"},
        ],
    },
    "ecommerce": {
        "search_customers": [{}, {"name": "a", "limit": 100}, {"city": "york", "tier": "gold"}, {"limit": 0}],
        "get_customer": ["SELECT id AS customer_id FROM customers", {"customer_id": 99999}],
        "search_products": [
            {},
            {"query": "a", "sort_by": "price_desc", "include_discontinued": True, "limit": 100},
            {"category": "Electronics", "in_stock_only": True},
            {"min_price": 10, "max_price": 50, "sort_by": "stock_asc"},
            {"min_price": 50, "max_price": 10},
        ],
        "get_order": [
            "SELECT o.id AS order_id FROM orders o JOIN order_items i ON i.order_id = o.id"
            " JOIN returns r ON r.order_item_id = i.id GROUP BY 1",
            "SELECT i.order_id FROM returns r JOIN order_items i ON i.id = r.order_item_id GROUP BY 1"
            " HAVING count(*) > 1 OR max(r.status = 'rejected')",
            "SELECT min(id) AS order_id FROM orders GROUP BY status",
            "SELECT id AS order_id FROM orders",
            {"order_id": 99999},
        ],
        "search_orders": [
            {},
            {"limit": 100},
            {"status": "delivered", "placed_from": "2026-01-01", "placed_to": "2026-06-30"},
            "SELECT customer_id FROM orders GROUP BY 1",
            "SELECT product_id FROM order_items GROUP BY 1",
            {"customer_id": 99999},
        ],
        "sales_report": [
            {},
            {"group_by": "product", "limit": 100},
            {"group_by": "month", "date_from": "2026-01-01", "date_to": "2026-06-30"},
            {"group_by": "brand"},
        ],
        "place_order": [
            "SELECT c.id AS customer_id, json_array(json_object('product_id', p.id, 'quantity', 2)) AS items"
            " FROM customers c JOIN products p ON p.id = c.id % 55 + 1",
            "SELECT c.id AS customer_id, json_array(json_object('product_id', p.id, 'quantity', 1),"
            " json_object('product_id', p.id % 55 + 1, 'quantity', 3)) AS items, code AS coupon_code"
            " FROM customers c JOIN products p ON p.id = c.id % 55 + 1 JOIN coupons ON 1",
            "SELECT 1 AS customer_id, json_array(json_object('product_id', id, 'quantity', 1),"
            " json_object('product_id', 99999, 'quantity', 1)) AS items FROM products WHERE NOT active",
            "SELECT 1 AS customer_id, json_array(json_object('product_id', 1, 'quantity', 1),"
            " json_object('product_id', id, 'quantity', 1)) AS items FROM products"
            " WHERE NOT active OR stock < 3",
            {"customer_id": 1, "items": [{"product_id": 1, "quantity": 1}, {"product_id": 1, "quantity": 2}]},
            {"customer_id": 1, "items": []},
        ],
        "cancel_order": [
            "SELECT id AS order_id, 'Changed mind' AS reason FROM orders",
            "SELECT id AS order_id FROM orders WHERE status = 'placed' ORDER BY coupon_code IS NULL, id",
            {"order_id": 99999},
        ],
        "ship_order": [
            "SELECT id AS order_id, 'UPS' AS carrier FROM orders WHERE status <> 'delivered'",
            {"order_id": 1, "carrier": "Pony"},
        ],
        "confirm_delivery": [
            "SELECT id AS order_id FROM orders WHERE status <> 'delivered'",
            "SELECT order_id, shipped_on AS delivered_on FROM shipments",
            {"order_id": 99999},
        ],
        "request_return": [
            "SELECT i.order_id, i.product_id, 1 AS quantity, 'size_fit' AS reason FROM order_items i"
            " JOIN orders o ON o.id = i.order_id WHERE o.status = 'delivered' ORDER BY o.placed_on DESC",
            "SELECT i.order_id, i.product_id, i.quantity + 1 AS quantity, 'damaged' AS reason"
            " FROM order_items i",
            "SELECT i.order_id, i.product_id, i.quantity, 'wrong_item' AS reason FROM returns r"
            " JOIN order_items i ON i.id = r.order_item_id ORDER BY r.status = 'rejected' DESC, r.id DESC",
            {"order_id": 1, "product_id": 1, "quantity": 0, "reason": "damaged"},
        ],
        "process_return": [
            "SELECT id AS return_id, 'approve' AS decision FROM returns",
            "SELECT id AS return_id, 'reject' AS decision FROM returns WHERE status = 'requested'",
            {"return_id": 99999, "decision": "approve"},
        ],
        "adjust_stock": [
            "SELECT id AS product_id, 25 AS change FROM products",
            "SELECT id AS product_id, -stock - 1 AS change FROM products",
            {"product_id": 1, "change": 0},
        ],
    },
    "project_tracker": {
        "get_issue": [
            "SELECT i.key AS issue_key FROM issues i JOIN issues c ON c.parent_id = i.id GROUP BY i.id",
            "SELECT key AS issue_key FROM issues",
            {"issue_key": "NOPE-1"},
        ],
        "search_issues": [
            {},
            {"limit": 100, "sort_by": "key"},
            {"project_key": "PAY", "status": "open", "sort_by": "due_date"},
            {"text": "a", "overdue": True, "sort_by": "created"},
            "SELECT assignee_id FROM issues WHERE assignee_id IS NOT NULL GROUP BY 1",
            "SELECT id AS sprint_id FROM sprints",
            {"unassigned": True, "assignee_id": 1},
        ],
        "find_users": [
            {},
            {"name": "a", "include_inactive": True},
            "SELECT key AS project_key FROM projects",
            {"project_key": "PAY", "role": "developer"},
            {"role": "developer"},
        ],
        "get_project": ["SELECT key AS project_key FROM projects", {"project_key": "NOPE"}],
        "get_sprint": ["SELECT id AS sprint_id FROM sprints", {"sprint_id": 99999}],
        "project_report": ["SELECT key AS project_key FROM projects", {"project_key": "NOPE"}],
        "create_issue": [
            "SELECT p.key AS project_key, m.user_id AS reporter_id, 'Flaky login test' AS title,"
            " 'bug' AS issue_type FROM memberships m JOIN projects p ON p.id = m.project_id",
            "SELECT p.key AS project_key, m.user_id AS reporter_id, 'Sub task' AS title, 'task' AS"
            " issue_type, 'high' AS priority, m.user_id AS assignee_id, i.key AS parent_key,"
            " 3 AS story_points, '2026-07-01' AS due_date FROM memberships m JOIN projects p"
            " ON p.id = m.project_id JOIN issues i ON i.project_id = p.id AND i.type = 'epic'",
            {"project_key": "PAY", "reporter_id": 1, "title": "x", "issue_type": "bug"},
        ],
        "update_issue": [
            "SELECT key AS issue_key, 'critical' AS priority, 5 AS story_points FROM issues",
            "SELECT key AS issue_key, 'Renamed issue' AS title, '2026-08-01' AS due_date FROM issues",
            {"issue_key": "PAY-1"},
        ],
        "assign_issue": [
            "SELECT i.key AS issue_key, m.user_id AS assignee_id FROM issues i JOIN memberships m"
            " ON m.project_id = i.project_id",
            "SELECT key AS issue_key, NULL AS assignee_id FROM issues",
            {"issue_key": "NOPE-1", "assignee_id": 1},
        ],
        "transition_issue": [
            "SELECT key AS issue_key, 'in_progress' AS status FROM issues",
            "SELECT key AS issue_key, 'done' AS status FROM issues WHERE status = 'review'",
            "SELECT key AS issue_key, 'open' AS status FROM issues WHERE status = 'done'",
            {"issue_key": "PAY-1", "status": "closed"},
        ],
        "add_comment": [
            "SELECT i.key AS issue_key, m.user_id AS author_id, 'Looking into it.' AS body FROM issues i"
            " JOIN memberships m ON m.project_id = i.project_id",
            {"issue_key": "PAY-1", "author_id": 1, "body": ""},
        ],
        "move_issue_to_sprint": [
            "SELECT i.key AS issue_key, s.id AS sprint_id FROM issues i JOIN sprints s"
            " ON s.project_id = i.project_id AND s.status <> 'closed' WHERE i.story_points IS NOT NULL",
            "SELECT key AS issue_key, NULL AS sprint_id FROM issues WHERE sprint_id IS NOT NULL",
            {"issue_key": "PAY-1", "sprint_id": 99999},
        ],
        "add_project_member": [
            "SELECT p.key AS project_key, u.id AS user_id, 'developer' AS role, m.user_id AS requested_by"
            " FROM projects p JOIN memberships m ON m.project_id = p.id AND m.role = 'maintainer'"
            " JOIN users u ON u.id % 6 = p.id % 6",
            {"project_key": "PAY", "user_id": 1, "role": "owner", "requested_by": 1},
        ],
    },
}


def _spread(rows: list[Any], n: int) -> list[Any]:
    """Up to ``n`` rows evenly spread over ``rows`` (first and last included), deterministically."""
    if len(rows) <= n:
        return rows
    return [rows[round(i * (len(rows) - 1) / (n - 1))] for i in range(n)]


def _decode(value: Any) -> Any:
    """Seed-query cells holding JSON arrays or objects (built with ``json_array``...) become lists/dicts."""
    if isinstance(value, str) and value[:1] in "[{":
        return json.loads(value)
    return value


def build_corpus(env_name: str, master: sqlite3.Connection) -> list[tuple[str, dict[str, Any]]]:
    """The (tool, arguments) calls of one environment, in a stable order."""
    calls = []
    for tool, specs in CORPUS[env_name].items():
        for spec in specs:
            if isinstance(spec, dict):
                calls.append((tool, spec))
                continue
            cursor = master.execute(spec)
            names = [column[0] for column in cursor.description]
            for row in _spread(cursor.fetchall(), SAMPLES_PER_QUERY):
                calls.append((tool, {k: _decode(v) for k, v in zip(names, row, strict=True)}))
    return calls


def run_env(env_name: str, repeat: int) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """Run every call of the environment's corpus on a fresh state: outcomes once, then ``repeat`` timings."""
    env = load_environment(env_name)
    missing = set(env.tools) - set(CORPUS[env_name])
    if missing:
        raise SystemExit(f"{env_name}: no corpus for tools {sorted(missing)}")
    store = StateStore(env)
    state = store.create()
    records: list[dict[str, Any]] = []
    samples: dict[str, list[float]] = {tool: [] for tool in CORPUS[env_name]}
    try:
        calls = build_corpus(env_name, store.master)
        for tool, args in calls:
            state.reset()
            outcome = execute_tool(env, state, tool, args)
            records.append(
                {
                    "env": env_name,
                    "tool": tool,
                    "args": args,
                    "ok": outcome.ok,
                    "value": outcome.value,
                    "state_hash": state.state_hash(),
                }
            )
        for _ in range(repeat):
            for tool, args in calls:
                state.reset()
                start = time.perf_counter()
                execute_tool(env, state, tool, args)
                samples[tool].append((time.perf_counter() - start) * 1000)
    finally:
        store.close_all()
    return records, samples


def _canonical(record: dict[str, Any]) -> str:
    """The record as JSON text, key order kept: equal text means byte-identical output."""
    return json.dumps(record, ensure_ascii=False)


def compare(records: list[dict[str, Any]], expected: list[dict[str, Any]], show: int = 5) -> list[str]:
    """Human-readable differences between two runs' call records (at most ``show`` of them)."""
    if len(records) != len(expected):
        return [f"{len(records)} calls now, {len(expected)} recorded (corpus changed?)"]
    problems = []
    for now, then in zip(records, expected, strict=True):
        if _canonical(now) != _canonical(then):
            fields = [k for k in now if _canonical({k: now[k]}) != _canonical({k: then.get(k)})]
            problems.append(
                f"{now['env']}.{now['tool']}({json.dumps(now['args'])}) differs in {', '.join(fields)}:\n"
                f"  recorded: {_canonical({k: then.get(k) for k in fields})[:600]}\n"
                f"  now:      {_canonical({k: now[k] for k in fields})[:600]}"
            )
    return problems[:show] + ([f"... and {len(problems) - show} more"] if len(problems) > show else [])


def print_costs(medians: dict[str, dict[str, Any]], baseline: dict[str, float] | None) -> None:
    """The per-tool table: calls, median and p99 ms, and the speed-up over the baseline medians."""
    table = Table(title="Tool cost per call (fresh state each call)")
    columns = ["env", "tool", "calls", "median ms", "p99 ms"] + (["vs baseline"] if baseline else [])
    for column in columns:
        table.add_column(column, justify="left" if column in ("env", "tool") else "right")
    for key, row in medians.items():
        env_name, tool = key.split(".", 1)
        cells = [env_name, tool, str(row["calls"]), f"{row['median_ms']:.3f}", f"{row['p99_ms']:.3f}"]
        if baseline is not None:
            before = baseline.get(key)
            cells.append(f"{before / row['median_ms']:.2f}x" if before else "-")
        table.add_row(*cells)
    Console(width=140).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", help="only this environment (repeatable)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each call")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--record", type=Path, help="write outcomes and medians to this JSON file")
    action.add_argument("--compare", type=Path, help="check outcomes against this recorded JSON file")
    parser.add_argument("--baseline", type=Path, help="a --record file whose medians the table compares to")
    args = parser.parse_args()

    names = args.env or builtin_names()
    records: list[dict[str, Any]] = []
    medians: dict[str, dict[str, Any]] = {}
    for env_name in names:
        env_records, samples = run_env(env_name, args.repeat)
        records.extend(env_records)
        for tool, times in samples.items():
            medians[f"{env_name}.{tool}"] = {
                "calls": sum(r["tool"] == tool for r in env_records),
                "median_ms": statistics.median(times),
                "p99_ms": percentile(times, 99),
            }
    baseline = None
    if args.baseline:
        recorded = json.loads(args.baseline.read_text())["tools"]
        baseline = {key: row["median_ms"] for key, row in recorded.items()}
    print_costs(medians, baseline)
    if args.record:
        args.record.write_text(json.dumps({"tools": medians, "calls": records}, ensure_ascii=False, indent=1))
        print(f"recorded {len(records)} calls to {args.record}")
    if args.compare:
        expected = json.loads(args.compare.read_text())["calls"]
        if args.env:
            expected = [r for r in expected if r["env"] in names]
        problems = compare(records, expected)
        if problems:
            print("\n".join(["outcomes differ from " + str(args.compare), *problems]))
            raise SystemExit(1)
        print(f"all {len(records)} outcomes and state hashes identical to {args.compare}")


if __name__ == "__main__":
    main()
