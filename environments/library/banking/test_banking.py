"""Tests of the banking environment: every tool on its success and error paths, and the seed itself."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from environments.sdk.digest import state_hash
from environments.sdk.errors import ErrorCode
from environments.sdk.state import build_seed
from environments.sdk.testing import EnvHarness, ToolCallFailed

from . import TODAY, env
from .environment import is_valid_iban

# Seed facts used below (the seed is deterministic).
CUSTOMER = 1  # standard tier, nothing sent today; owns 1001 (EUR checking, 2 cards) and 1002 (GBP checking)
CHECKING, GBP_CHECKING, OTHER_CHECKING = 1001, 1002, 1003
SAVINGS_OF_5, CHECKING_OF_5 = 1010, 1009  # customer 5 holds 3 open accounts
FROZEN_CHECKING, FROZEN_OWNER_PAYEE = 1012, 17  # customer 6
CLOSED_SAVINGS = 1006
LOW_BALANCE = 1074  # customer 35: 27.30 EUR with a 500.00 overdraft
LIMIT_SENDER = 1027  # customer 13: 375.00 of the 5000.00 EUR daily limit already used today
PENDING_CUSTOMER = 34
CUSTOMER_1_PAYEE = 1
VALID_IBAN = "DE89 3704 0044 0532 0130 00"
VALID_GB_IBAN = "GB82WEST12345698765432"


@pytest.fixture
def h():
    with EnvHarness(env) as harness:
        yield harness


def fails(h: EnvHarness, code: ErrorCode, tool: str, **args: Any) -> str:
    """Assert that the call fails with ``code``; return the error message."""
    with pytest.raises(ToolCallFailed) as err:
        h.call(tool, **args)
    assert err.value.code == code, err.value.message
    return err.value.message


def balance(h: EnvHarness, account_id: int) -> Decimal:
    return Decimal(h.call("get_account", account_id=account_id)["balance"])


def transaction_count(h: EnvHarness) -> int:
    return h.query("SELECT COUNT(*) FROM transactions")[0][0]


# --- seed -----------------------------------------------------------------------------------------------


def test_seed_has_200_rows_across_related_tables(h: EnvHarness) -> None:
    counts = {
        t: h.query(f"SELECT COUNT(*) FROM {t}")[0][0] for t in ("customers", "accounts", "cards", "payees")
    }
    counts["transactions"] = transaction_count(h)
    assert all(n > 0 for n in counts.values())
    assert len(counts) >= 4 and sum(counts.values()) >= 200
    assert h.query("SELECT COUNT(*) FROM accounts WHERE customer_id NOT IN (SELECT id FROM customers)") == [
        (0,)
    ]


def test_seed_balances_match_their_transactions(h: EnvHarness) -> None:
    mismatched = h.query(
        "SELECT a.id FROM accounts a LEFT JOIN transactions t ON t.account_id = a.id "
        "GROUP BY a.id HAVING a.balance_cents != COALESCE(SUM(t.amount_cents), 0)"
    )
    assert mismatched == []
    assert h.query("SELECT COUNT(*) FROM accounts WHERE balance_cents < -overdraft_limit_cents") == [(0,)]
    assert h.query("SELECT COUNT(*) FROM transactions WHERE posted_on > ?", TODAY.isoformat()) == [(0,)]
    assert all(
        is_valid_iban(iban) for (iban,) in h.query("SELECT iban FROM accounts UNION SELECT iban FROM payees")
    )


def test_seed_is_deterministic(tmp_path: Path) -> None:
    build_seed(env, tmp_path / "a.db")
    build_seed(env, tmp_path / "b.db")
    assert state_hash(sqlite3.connect(tmp_path / "a.db")) == state_hash(sqlite3.connect(tmp_path / "b.db"))


# --- reads ----------------------------------------------------------------------------------------------


def test_search_customers_filters_and_sorts(h: EnvHarness) -> None:
    lopez = h.call("search_customers", query="LOPEZ")
    assert [c["last_name"] for c in lopez] == ["Lopez"] * len(lopez) and len(lopez) >= 2
    assert [c["first_name"] for c in lopez] == sorted(c["first_name"] for c in lopez)
    by_email = h.call("search_customers", query="@icloud.com", limit=3)
    assert len(by_email) == 3 and all(c["email"].endswith("@icloud.com") for c in by_email)
    pending = h.call("search_customers", kyc_status="pending")
    assert {c["id"] for c in pending} == {34, 35, 36}
    dublin = h.call("search_customers", city="dublin", tier="standard")
    assert dublin and all(c["city"] == "Dublin" and c["tier"] == "standard" for c in dublin)
    assert h.call("search_customers", query="nobody-by-this-name") == []
    fails(h, ErrorCode.VALIDATION_ERROR, "search_customers", limit=0)
    fails(h, ErrorCode.VALIDATION_ERROR, "search_customers", tier="gold")


def test_get_customer(h: EnvHarness) -> None:
    customer = h.call("get_customer", customer_id=CUSTOMER)
    assert customer["first_name"] == "Tiago" and customer["tier"] == "standard"
    assert customer["daily_transfer_limit"] == "5000.00"
    assert [a["id"] for a in customer["accounts"]] == [CHECKING, GBP_CHECKING]
    assert (customer["sent_today"], customer["remaining_today"]) == ("0.00", "5000.00")
    used = h.call("get_customer", customer_id=13)
    assert (used["sent_today"], used["remaining_today"]) == ("375.00", "4625.00")
    fails(h, ErrorCode.NOT_FOUND, "get_customer", customer_id=999)


def test_get_account(h: EnvHarness) -> None:
    account = h.call("get_account", account_id=CHECKING)
    assert account["owner_name"] == "Tiago Romano" and account["currency"] == "EUR"
    assert Decimal(account["available_balance"]) == Decimal(account["balance"]) + Decimal(
        account["overdraft_limit"]
    )
    assert [c["id"] for c in account["cards"]] == [1, 2]
    frozen = h.call("get_account", account_id=FROZEN_CHECKING)
    assert frozen["status"] == "frozen" and frozen["available_balance"] == "0.00"
    fails(h, ErrorCode.NOT_FOUND, "get_account", account_id=42)


def test_search_transactions(h: EnvHarness) -> None:
    may = h.call(
        "search_transactions",
        account_id=CHECKING,
        kind="payment",
        date_from="2026-05-01",
        date_to="2026-05-31",
    )
    assert may and all(t["kind"] == "payment" and "2026-05-01" <= t["posted_on"] <= "2026-05-31" for t in may)
    assert [t["posted_on"] for t in may] == sorted((t["posted_on"] for t in may), reverse=True)
    assert all(Decimal(t["amount"]) < 0 for t in may)
    big = h.call("search_transactions", account_id=CHECKING, min_amount="1000", limit=100)
    assert big and all(abs(Decimal(t["amount"])) >= 1000 for t in big)
    salary = h.call("search_transactions", account_id=CHECKING, text="salary", category="income")
    assert len(salary) == 5 and all(t["description"].startswith("Salary") for t in salary)
    assert len(h.call("search_transactions", account_id=CHECKING, limit=2)) == 2
    message = fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "search_transactions",
        account_id=CHECKING,
        date_from="2026-05-02",
        date_to="2026-05-01",
    )
    assert "date_from" in message
    fails(h, ErrorCode.VALIDATION_ERROR, "search_transactions", account_id=CHECKING, kind="refund")
    fails(h, ErrorCode.NOT_FOUND, "search_transactions", account_id=999)


def test_account_statement(h: EnvHarness) -> None:
    may = h.call("account_statement", account_id=CHECKING, month="2026-05")
    june = h.call("account_statement", account_id=CHECKING, month="2026-06")
    for statement in (may, june):
        flow = Decimal(statement["money_in"]) - Decimal(statement["money_out"])
        assert Decimal(statement["closing_balance"]) - Decimal(statement["opening_balance"]) == flow
        spent = sum(Decimal(c["total"]) for c in statement["spending_by_category"])
        assert spent == Decimal(statement["money_out"])
    assert june["opening_balance"] == may["closing_balance"]
    assert Decimal(june["closing_balance"]) == balance(h, CHECKING)
    assert (june["period_start"], june["period_end"]) == ("2026-06-01", TODAY.isoformat())
    totals = [Decimal(c["total"]) for c in may["spending_by_category"]]
    assert totals == sorted(totals, reverse=True)
    fails(h, ErrorCode.VALIDATION_ERROR, "account_statement", account_id=CHECKING, month="2026-07")
    fails(h, ErrorCode.VALIDATION_ERROR, "account_statement", account_id=CHECKING, month="2026-13")
    fails(h, ErrorCode.NOT_FOUND, "account_statement", account_id=999, month="2026-05")


def test_list_payees(h: EnvHarness) -> None:
    payees = h.call("list_payees", customer_id=CUSTOMER)
    assert [p["name"] for p in payees] == sorted(p["name"] for p in payees) and len(payees) == 4
    assert all(p["customer_id"] == CUSTOMER for p in payees)
    assert h.call("list_payees", customer_id=CUSTOMER, currency="GBP") == []
    assert [p["id"] for p in h.call("list_payees", customer_id=32, currency="GBP")] == [119, 120]
    fails(h, ErrorCode.NOT_FOUND, "list_payees", customer_id=999)


def test_list_cards(h: EnvHarness) -> None:
    assert [c["id"] for c in h.call("list_cards", customer_id=CUSTOMER)] == [1, 2, 3, 4]
    blocked = h.call("list_cards", customer_id=6, status="blocked")
    assert [(c["id"], c["account_id"]) for c in blocked] == [(14, FROZEN_CHECKING)]
    assert h.call("list_cards", customer_id=CUSTOMER, status="expired") == []
    fails(h, ErrorCode.NOT_FOUND, "list_cards", customer_id=999)


# --- transfers and payments -----------------------------------------------------------------------------


def test_transfer_funds_moves_money_and_counts_toward_the_daily_limit(h: EnvHarness) -> None:
    before_from, before_to, before_rows = (
        balance(h, CHECKING),
        balance(h, OTHER_CHECKING),
        transaction_count(h),
    )
    result = h.call(
        "transfer_funds",
        from_account_id=CHECKING,
        to_account_id=OTHER_CHECKING,
        amount="120.55",
        reference="Dinner",
    )
    assert result["debit"]["amount"] == "-120.55" and result["credit"]["amount"] == "120.55"
    assert result["debit"]["description"] == "Transfer to Magnus Demir - Dinner"
    assert result["debit"]["posted_on"] == TODAY.isoformat()
    assert balance(h, CHECKING) == before_from - Decimal("120.55")
    assert balance(h, OTHER_CHECKING) == before_to + Decimal("120.55")
    assert transaction_count(h) == before_rows + 2
    assert h.call("get_customer", customer_id=CUSTOMER)["sent_today"] == "120.55"


def test_own_account_transfers_ignore_the_daily_limit(h: EnvHarness) -> None:
    h.call("transfer_funds", from_account_id=CHECKING_OF_5, to_account_id=SAVINGS_OF_5, amount=6000)
    h.call("transfer_funds", from_account_id=SAVINGS_OF_5, to_account_id=CHECKING_OF_5, amount="7000.00")
    assert h.call("get_customer", customer_id=5)["sent_today"] == "0.00"


def test_transfer_funds_daily_limit(h: EnvHarness) -> None:
    message = fails(
        h,
        ErrorCode.LIMIT_EXCEEDED,
        "transfer_funds",
        from_account_id=LIMIT_SENDER,
        to_account_id=CHECKING,
        amount="4625.01",
    )
    assert "customer 13" in message and "4625.00" in message
    h.call("transfer_funds", from_account_id=LIMIT_SENDER, to_account_id=CHECKING, amount="4625.00")
    fails(
        h,
        ErrorCode.LIMIT_EXCEEDED,
        "transfer_funds",
        from_account_id=LIMIT_SENDER,
        to_account_id=CHECKING,
        amount="0.01",
    )
    assert h.call("get_customer", customer_id=13)["remaining_today"] == "0.00"


def test_transfer_funds_balance_plus_overdraft(h: EnvHarness) -> None:
    message = fails(
        h,
        ErrorCode.LIMIT_EXCEEDED,
        "transfer_funds",
        from_account_id=LOW_BALANCE,
        to_account_id=CHECKING,
        amount="527.31",
    )
    assert "account 1074" in message and "527.30" in message
    h.call("transfer_funds", from_account_id=LOW_BALANCE, to_account_id=CHECKING, amount="527.30")
    account = h.call("get_account", account_id=LOW_BALANCE)
    assert (account["balance"], account["available_balance"]) == ("-500.00", "0.00")


@pytest.mark.parametrize(
    ("source", "target", "code", "fragment"),
    [
        (CHECKING, 9999, ErrorCode.NOT_FOUND, "account 9999"),
        (9999, CHECKING, ErrorCode.NOT_FOUND, "account 9999"),
        (CHECKING, CHECKING, ErrorCode.VALIDATION_ERROR, "itself"),
        (FROZEN_CHECKING, CHECKING, ErrorCode.FORBIDDEN, "frozen"),
        (CHECKING, FROZEN_CHECKING, ErrorCode.FORBIDDEN, "frozen"),
        (CLOSED_SAVINGS, CHECKING, ErrorCode.PRECONDITION_FAILED, "closed"),
        (CHECKING, CLOSED_SAVINGS, ErrorCode.PRECONDITION_FAILED, "closed"),
        (CHECKING, GBP_CHECKING, ErrorCode.VALIDATION_ERROR, "GBP"),
        (SAVINGS_OF_5, CHECKING, ErrorCode.FORBIDDEN, "savings account 1010"),
    ],
)
def test_transfer_funds_rules(
    h: EnvHarness, source: int, target: int, code: ErrorCode, fragment: str
) -> None:
    rows = transaction_count(h)
    message = fails(h, code, "transfer_funds", from_account_id=source, to_account_id=target, amount="10.00")
    assert fragment in message
    assert transaction_count(h) == rows


def test_transfer_funds_argument_validation(h: EnvHarness) -> None:
    for amount in (0, "-5", "10.001", "ten"):
        fails(
            h,
            ErrorCode.VALIDATION_ERROR,
            "transfer_funds",
            from_account_id=CHECKING,
            to_account_id=OTHER_CHECKING,
            amount=amount,
        )
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "transfer_funds",
        from_account_id="abc",
        to_account_id=OTHER_CHECKING,
        amount=5,
    )
    message = fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "transfer_funds",
        from_account_id=CHECKING,
        to_account_id=OTHER_CHECKING,
    )
    assert "amount" in message
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "transfer_funds",
        from_account_id=CHECKING,
        to_account_id=OTHER_CHECKING,
        amount=5,
        reference="x" * 36,
    )


def test_failed_transfer_leaves_no_partial_changes(h: EnvHarness) -> None:
    before = h.state.state_hash()
    fails(
        h,
        ErrorCode.LIMIT_EXCEEDED,
        "transfer_funds",
        from_account_id=LIMIT_SENDER,
        to_account_id=CHECKING,
        amount="5000.00",
    )
    fails(
        h, ErrorCode.FORBIDDEN, "pay_payee", account_id=FROZEN_CHECKING, payee_id=FROZEN_OWNER_PAYEE, amount=5
    )
    assert h.state.state_hash() == before


def test_pay_payee(h: EnvHarness) -> None:
    before = balance(h, CHECKING)
    payment = h.call(
        "pay_payee", account_id=CHECKING, payee_id=CUSTOMER_1_PAYEE, amount="64.20", reference="INV-2291"
    )
    assert (payment["kind"], payment["category"], payment["payee_id"]) == ("payment", "utilities", 1)
    assert payment["description"] == "Payment to Virgin Media - INV-2291"
    assert Decimal(payment["balance_after"]) == before - Decimal("64.20") == balance(h, CHECKING)
    assert h.call("get_customer", customer_id=CUSTOMER)["sent_today"] == "64.20"


def test_pay_payee_in_gbp_counts_converted_toward_the_daily_limit(h: EnvHarness) -> None:
    h.call("pay_payee", account_id=1070, payee_id=119, amount="1000.00")
    assert h.call("get_customer", customer_id=32)["sent_today"] == "1170.00"


@pytest.mark.parametrize(
    ("account_id", "payee_id", "amount", "code", "fragment"),
    [
        (9999, CUSTOMER_1_PAYEE, "5.00", ErrorCode.NOT_FOUND, "account 9999"),
        (CHECKING, 9999, "5.00", ErrorCode.NOT_FOUND, "payee 9999"),
        (CHECKING, FROZEN_OWNER_PAYEE, "5.00", ErrorCode.FORBIDDEN, "belongs to customer 6"),
        (FROZEN_CHECKING, FROZEN_OWNER_PAYEE, "5.00", ErrorCode.FORBIDDEN, "frozen"),
        (SAVINGS_OF_5, 13, "5.00", ErrorCode.FORBIDDEN, "savings account"),
        (1017, 27, "5.00", ErrorCode.VALIDATION_ERROR, "GBP"),
        (CHECKING_OF_5, 13, "5000.01", ErrorCode.LIMIT_EXCEEDED, "daily outgoing limit"),
        (CHECKING_OF_5, 13, "13449.92", ErrorCode.LIMIT_EXCEEDED, "available"),
    ],
)
def test_pay_payee_rules(
    h: EnvHarness, account_id: int, payee_id: int, amount: str, code: ErrorCode, fragment: str
) -> None:
    rows = transaction_count(h)
    assert fragment in fails(h, code, "pay_payee", account_id=account_id, payee_id=payee_id, amount=amount)
    assert transaction_count(h) == rows


def test_closed_account_cannot_pay(h: EnvHarness) -> None:
    new = h.call("open_account", customer_id=CUSTOMER, account_type="checking", currency="EUR")
    h.call("close_account", account_id=new["id"])
    fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "pay_payee",
        account_id=new["id"],
        payee_id=CUSTOMER_1_PAYEE,
        amount=1,
    )


# --- payees, cards and accounts -------------------------------------------------------------------------


def test_add_payee_then_pay_it(h: EnvHarness) -> None:
    payee = h.call(
        "add_payee",
        customer_id=CUSTOMER,
        name=" Anna Schmidt ",
        iban=VALID_IBAN.lower(),
        bank_name="Commerzbank",
        currency="EUR",
    )
    assert (payee["name"], payee["iban"], payee["category"]) == (
        "Anna Schmidt",
        "DE89370400440532013000",
        "personal",
    )
    assert payee["added_on"] == TODAY.isoformat()
    assert payee["id"] in [p["id"] for p in h.call("list_payees", customer_id=CUSTOMER)]
    payment = h.call("pay_payee", account_id=CHECKING, payee_id=payee["id"], amount=25)
    assert payment["amount"] == "-25.00"


def test_add_payee_rules(h: EnvHarness) -> None:
    args = {"name": "Anna Schmidt", "bank_name": "Commerzbank", "currency": "EUR"}
    fails(h, ErrorCode.NOT_FOUND, "add_payee", customer_id=999, iban=VALID_IBAN, **args)
    for bad in ("DE89370400440532013001", "not an iban", "DE893704"):
        assert "IBAN" in fails(
            h, ErrorCode.VALIDATION_ERROR, "add_payee", customer_id=CUSTOMER, iban=bad, **args
        )
    existing = h.call("list_payees", customer_id=CUSTOMER)[0]
    message = fails(h, ErrorCode.CONFLICT, "add_payee", customer_id=CUSTOMER, iban=existing["iban"], **args)
    assert f"payee {existing['id']}" in message
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "add_payee",
        customer_id=CUSTOMER,
        iban=VALID_IBAN,
        name="Anna",
        bank_name="Commerzbank",
        currency="CHF",
    )
    fails(h, ErrorCode.VALIDATION_ERROR, "add_payee", customer_id=CUSTOMER, iban=VALID_IBAN, name="Anna")


def test_set_card_status_lifecycle(h: EnvHarness) -> None:
    assert h.call("set_card_status", card_id=1, action="block")["status"] == "blocked"
    assert "already blocked" in fails(h, ErrorCode.CONFLICT, "set_card_status", card_id=1, action="block")
    assert h.call("set_card_status", card_id=1, action="unblock")["status"] == "active"
    fails(h, ErrorCode.CONFLICT, "set_card_status", card_id=1, action="unblock")
    assert h.call("set_card_status", card_id=1, action="cancel")["status"] == "cancelled"
    assert "cancelled" in fails(
        h, ErrorCode.PRECONDITION_FAILED, "set_card_status", card_id=1, action="unblock"
    )
    statuses = [c["status"] for c in h.call("list_cards", customer_id=CUSTOMER)]
    assert statuses == ["cancelled", "active", "active", "active"]


def test_set_card_status_rules(h: EnvHarness) -> None:
    assert "expired" in fails(h, ErrorCode.PRECONDITION_FAILED, "set_card_status", card_id=7, action="block")
    message = fails(h, ErrorCode.FORBIDDEN, "set_card_status", card_id=14, action="unblock")
    assert f"account {FROZEN_CHECKING} is frozen" in message
    assert h.call("set_card_status", card_id=14, action="cancel")["status"] == "cancelled"
    fails(h, ErrorCode.NOT_FOUND, "set_card_status", card_id=999, action="block")
    fails(h, ErrorCode.VALIDATION_ERROR, "set_card_status", card_id=1, action="destroy")


def test_open_account(h: EnvHarness) -> None:
    account = h.call(
        "open_account",
        customer_id=CUSTOMER,
        account_type="savings",
        currency="EUR",
        nickname="Holiday savings",
    )
    assert account["id"] == 1076 and is_valid_iban(account["iban"])
    assert (account["balance"], account["overdraft_limit"], account["status"]) == ("0.00", "0.00", "active")
    assert account["opened_on"] == TODAY.isoformat() and account["nickname"] == "Holiday savings"
    assert [a["id"] for a in h.call("get_customer", customer_id=CUSTOMER)["accounts"]][-1] == 1076
    h.call("transfer_funds", from_account_id=CHECKING, to_account_id=1076, amount=250)
    assert balance(h, 1076) == Decimal("250.00")


def test_open_account_rules(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "open_account", customer_id=999, account_type="checking", currency="EUR")
    message = fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "open_account",
        customer_id=PENDING_CUSTOMER,
        account_type="savings",
        currency="EUR",
    )
    assert "verification" in message
    assert "standard tier" in fails(
        h, ErrorCode.FORBIDDEN, "open_account", customer_id=CUSTOMER, account_type="business", currency="EUR"
    )
    h.call("open_account", customer_id=5, account_type="savings", currency="USD")
    message = fails(
        h, ErrorCode.LIMIT_EXCEEDED, "open_account", customer_id=5, account_type="checking", currency="EUR"
    )
    assert "4 open accounts" in message
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "open_account",
        customer_id=CUSTOMER,
        account_type="loan",
        currency="EUR",
    )


def test_close_account_after_emptying_it(h: EnvHarness) -> None:
    payee = h.call(
        "add_payee",
        customer_id=CUSTOMER,
        name="Oliver Hart",
        iban=VALID_GB_IBAN,
        bank_name="NatWest",
        currency="GBP",
    )
    remaining = h.call("get_account", account_id=GBP_CHECKING)["balance"]
    message = fails(h, ErrorCode.PRECONDITION_FAILED, "close_account", account_id=GBP_CHECKING)
    assert remaining in message
    h.call("pay_payee", account_id=GBP_CHECKING, payee_id=payee["id"], amount=remaining)
    closed = h.call("close_account", account_id=GBP_CHECKING)
    assert (closed["status"], closed["closed_on"], closed["cancelled_card_ids"]) == (
        "closed",
        TODAY.isoformat(),
        [3, 4],
    )
    assert h.call("list_cards", customer_id=CUSTOMER, status="cancelled")[-1]["id"] == 4
    fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "transfer_funds",
        from_account_id=1070,
        to_account_id=GBP_CHECKING,
        amount=1,
    )


def test_close_account_rules(h: EnvHarness) -> None:
    fails(h, ErrorCode.NOT_FOUND, "close_account", account_id=999)
    assert "already closed" in fails(
        h, ErrorCode.PRECONDITION_FAILED, "close_account", account_id=CLOSED_SAVINGS
    )
    assert "frozen" in fails(h, ErrorCode.FORBIDDEN, "close_account", account_id=FROZEN_CHECKING)
    assert "must be zero" in fails(h, ErrorCode.PRECONDITION_FAILED, "close_account", account_id=CHECKING)
    fails(h, ErrorCode.VALIDATION_ERROR, "close_account")
