"""Banking tools: lookups, searches and reports, and money movements under the bank's rules.

Amounts are exchanged as decimals with at most two places (``12.50``); they are stored as cents.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field
from sqlalchemy import ColumnElement, Select, case, func, or_, select
from sqlalchemy.orm import Session, aliased

from environments.sdk import (
    Conflict,
    Forbidden,
    LimitExceeded,
    NotFound,
    PreconditionFailed,
    ValidationFailed,
    orm_to_dict,
)
from environments.sdk.helpers import check_range

from .environment import (
    EUR_RATE_BP,
    HOME_CURRENCY,
    MAX_OPEN_ACCOUNTS,
    TODAY,
    account_iban,
    env,
    is_valid_iban,
)
from .ledger import can_debit, post_entry, transfer_entries, with_reference
from .models import Account, Base, Card, Customer, Payee, Transaction

Amount = Annotated[Decimal, Field(gt=0, max_digits=12, decimal_places=2)]
Reference = Annotated[str, Field(min_length=1, max_length=35)]
Nickname = Annotated[str, Field(min_length=1, max_length=40)]
Limit = Annotated[int, Field(ge=1, le=100)]
Month = Annotated[str, Field(pattern=r"^\d{4}-(0[1-9]|1[0-2])$")]
Currency = Literal["EUR", "USD", "GBP"]
AccountType = Literal["checking", "savings", "business"]
PayeeCategory = Literal["rent", "utilities", "insurance", "personal"]
TransactionKind = Literal[
    "deposit", "withdrawal", "card_purchase", "payment", "transfer_in", "transfer_out", "fee", "interest"
]
CARD_ACTIONS = {"block": "blocked", "unblock": "active", "cancel": "cancelled"}

RowT = TypeVar("RowT", bound=Base)


def _money(cents: int) -> Decimal:
    return Decimal(cents).scaleb(-2)


def _cents(amount: Decimal) -> int:
    return int(amount * 100)


def _to_eur_cents(cents: int, currency: str) -> int:
    return cents * EUR_RATE_BP[currency] // 10_000


def _public(row: Base) -> dict[str, Any]:
    """A row as a dict whose ``*_cents`` columns become decimal amounts (``balance_cents`` -> ``balance``)."""
    data = orm_to_dict(row)
    for key in [k for k in data if k.endswith("_cents")]:
        data[key.removesuffix("_cents")] = _money(data.pop(key))
    return data


def _not_found(model: type[Base], key: int) -> NotFound:
    return NotFound(f"{model.__tablename__.removesuffix('s')} {key} does not exist")


def _get(db: Session, model: type[RowT], key: int) -> RowT:
    row = db.get(model, key)
    if row is None:
        raise _not_found(model, key)
    return row


def _account_view(account: Account) -> dict[str, Any]:
    available = account.balance_cents + account.overdraft_limit_cents if account.status == "active" else 0
    return {**_public(account), "available_balance": _money(available)}


def _full_name(customer: Customer) -> str:
    return f"{customer.first_name} {customer.last_name}"


def _owner_name(db: Session, account: Account) -> str:
    return _full_name(_get(db, Customer, account.customer_id))


_COUNTERPARTY = aliased(Account)
"""The receiving account of a transfer (built once: an alias costs more to build than the query to run)."""


def _daily_usage(db: Session, customer: Customer) -> tuple[int, int]:
    """EUR cents sent today and still allowed today; payments and transfers to other customers count."""
    rows = db.execute(
        select(Transaction.amount_cents, Account.currency)
        .join(Account, Transaction.account_id == Account.id)
        .outerjoin(_COUNTERPARTY, Transaction.counterparty_account_id == _COUNTERPARTY.id)
        .where(
            Account.customer_id == customer.id,
            Transaction.posted_on == TODAY,
            or_(
                Transaction.kind == "payment",
                (Transaction.kind == "transfer_out") & (_COUNTERPARTY.customer_id != customer.id),
            ),
        )
    )
    sent = sum(_to_eur_cents(-amount, currency) for amount, currency in rows)
    return sent, max(customer.daily_transfer_limit_cents - sent, 0)


def _require_open(account: Account, action: str) -> None:
    if account.status == "frozen":
        raise Forbidden(f"account {account.id} is frozen and cannot {action} money")
    if account.status == "closed":
        raise PreconditionFailed(
            f"account {account.id} was closed on {account.closed_on} and cannot {action} money"
        )


def _check_debit(db: Session, account: Account, amount_cents: int, *, counts_to_daily_limit: bool) -> None:
    """Funds (balance + overdraft) and, for money leaving the customer, the daily outgoing limit."""
    if not can_debit(account, amount_cents):
        available = _money(account.balance_cents + account.overdraft_limit_cents)
        raise LimitExceeded(
            f"account {account.id} has {available} {account.currency} available (balance plus overdraft); "
            f"cannot send {_money(amount_cents)} {account.currency}"
        )
    if not counts_to_daily_limit:
        return
    customer = _get(db, Customer, account.customer_id)
    _sent, remaining = _daily_usage(db, customer)
    requested = _to_eur_cents(amount_cents, account.currency)
    if requested > remaining:
        raise LimitExceeded(
            f"customer {customer.id} has {_money(remaining)} {HOME_CURRENCY} left of the daily outgoing "
            f"limit of {_money(customer.daily_transfer_limit_cents)} {HOME_CURRENCY}; this payment counts "
            f"as {_money(requested)} {HOME_CURRENCY}"
        )


def _require_same_currency(account: Account, currency: str, target: str) -> None:
    if account.currency != currency:
        raise ValidationFailed(
            f"account {account.id} holds {account.currency} but {target} is in {currency}; "
            "money can only move between the same currency"
        )


def _filtered(
    stmt: Select[Any], filters: list[tuple[Any, Callable[[Any], ColumnElement[bool]]]]
) -> Select[Any]:
    """``stmt`` restricted by ``build(value)`` for each ``(value, build)`` filter whose value was given."""
    return stmt.where(*(build(value) for value, build in filters if value is not None))


@env.tool
def search_customers(
    db: Session,
    query: str | None = None,
    city: str | None = None,
    tier: Literal["standard", "premium", "private"] | None = None,
    kyc_status: Literal["verified", "pending"] | None = None,
    limit: Limit = 20,
) -> list[dict]:
    """Search customers by name or e-mail, city, tier and identity-verification status, sorted by name.

    Args:
        query: Part of the customer's full name or e-mail address (case-insensitive).
        city: The customer's city, exactly (case-insensitive).
        tier: Only customers of this service tier.
        kyc_status: Only customers whose identity verification has this status.
        limit: The maximum number of customers returned (1-100).
    """
    stmt = select(Customer).order_by(Customer.last_name, Customer.first_name, Customer.id).limit(limit)
    full_name = Customer.first_name + " " + Customer.last_name
    filters = [
        (
            query,
            lambda q: or_(
                full_name.icontains(q, autoescape=True), Customer.email.icontains(q, autoescape=True)
            ),
        ),
        (city, lambda c: func.lower(Customer.city) == c.lower()),
        (tier, lambda t: Customer.tier == t),
        (kyc_status, lambda k: Customer.kyc_status == k),
    ]
    return [_public(c) for c in db.scalars(_filtered(stmt, filters))]


@env.tool
def get_customer(db: Session, customer_id: int) -> dict:
    """Get a customer's profile, their accounts, and how much of today's outgoing transfer limit is left.

    The daily limit is in EUR; payments and transfers to other customers count (converted at the bank's
    reference rates), transfers between the customer's own accounts do not.

    Args:
        customer_id: The customer's id.
    """
    rows = db.execute(
        select(Customer, Account)
        .outerjoin(Account, Account.customer_id == Customer.id)
        .where(Customer.id == customer_id)
        .order_by(Account.id)
    ).all()
    if not rows:
        raise _not_found(Customer, customer_id)
    customer = rows[0][0]
    sent, remaining = _daily_usage(db, customer)
    return {
        **_public(customer),
        "sent_today": _money(sent),
        "remaining_today": _money(remaining),
        "accounts": [_account_view(a) for _, a in rows if a is not None],
    }


@env.tool
def get_account(db: Session, account_id: int) -> dict:
    """Get an account: balance, overdraft, available balance, status, owner and cards.

    Args:
        account_id: The account's id.
    """
    rows = db.execute(
        select(Account, Customer, Card)
        .join(Customer, Account.customer_id == Customer.id)
        .outerjoin(Card, Card.account_id == Account.id)
        .where(Account.id == account_id)
        .order_by(Card.id)
    ).all()
    if not rows:
        raise _not_found(Account, account_id)
    account, owner, _ = rows[0]
    return {
        **_account_view(account),
        "owner_name": _full_name(owner),
        "cards": [_public(card) for *_, card in rows if card is not None],
    }


@env.tool
def search_transactions(
    db: Session,
    account_id: int,
    kind: TransactionKind | None = None,
    category: str | None = None,
    date_from: date | None = None,
    date_to: date | None = None,
    min_amount: Annotated[Decimal, Field(ge=0, decimal_places=2)] | None = None,
    text: str | None = None,
    limit: Limit = 20,
) -> list[dict]:
    """Search an account's transactions, newest first. Amounts are signed: money out is negative.

    Args:
        account_id: The account's id.
        kind: Only transactions of this kind.
        category: Only this category (e.g. groceries, rent, utilities, income, transfer, fees).
        date_from: Earliest posting date, inclusive (YYYY-MM-DD).
        date_to: Latest posting date, inclusive (YYYY-MM-DD).
        min_amount: Only transactions whose absolute amount is at least this much.
        text: Part of the description, e.g. a merchant or payee name (case-insensitive).
        limit: The maximum number of transactions returned (1-100).
    """
    _get(db, Account, account_id)
    check_range(date_from, date_to, "date_from", "date_to")
    stmt = (
        select(Transaction)
        .where(Transaction.account_id == account_id)
        .order_by(Transaction.posted_on.desc(), Transaction.id.desc())
        .limit(limit)
    )
    filters = [
        (kind, lambda k: Transaction.kind == k),
        (category, lambda c: Transaction.category == c),
        (date_from, lambda d: Transaction.posted_on >= d),
        (date_to, lambda d: Transaction.posted_on <= d),
        (min_amount, lambda m: func.abs(Transaction.amount_cents) >= _cents(m)),
        (text, lambda t: Transaction.description.icontains(t, autoescape=True)),
    ]
    return [_public(t) for t in db.scalars(_filtered(stmt, filters))]


@env.tool
def account_statement(db: Session, account_id: int, month: Month) -> dict:
    """Monthly statement of an account: opening and closing balance, money in and out, spending by category.

    Args:
        account_id: The account's id.
        month: The statement month as YYYY-MM; it cannot be after the current month.
    """
    account = _get(db, Account, account_id)
    year, month_number = (int(part) for part in month.split("-"))
    start = date(year, month_number, 1)
    if start > TODAY:
        raise ValidationFailed(f"month {month} is in the future (today is {TODAY})")
    end = min(date(year, month_number, calendar.monthrange(year, month_number)[1]), TODAY)
    in_account = Transaction.account_id == account_id
    opening = db.scalar(
        select(func.coalesce(func.sum(Transaction.amount_cents), 0)).where(
            in_account, Transaction.posted_on < start
        )
    )
    in_month = (in_account, Transaction.posted_on.between(start, end))
    money_in, money_out, count = db.execute(
        select(
            func.coalesce(
                func.sum(case((Transaction.amount_cents > 0, Transaction.amount_cents), else_=0)), 0
            ),
            func.coalesce(
                func.sum(case((Transaction.amount_cents < 0, -Transaction.amount_cents), else_=0)), 0
            ),
            func.count(),
        ).where(*in_month)
    ).one()
    spent = func.sum(-Transaction.amount_cents)
    by_category = db.execute(
        select(Transaction.category, spent, func.count())
        .where(*in_month, Transaction.amount_cents < 0)
        .group_by(Transaction.category)
        .order_by(spent.desc(), Transaction.category)
    )
    return {
        "account_id": account_id,
        "currency": account.currency,
        "period_start": start,
        "period_end": end,
        "opening_balance": _money(opening),
        "money_in": _money(money_in),
        "money_out": _money(money_out),
        "closing_balance": _money(opening + money_in - money_out),
        "transaction_count": count,
        "spending_by_category": [
            {"category": category, "total": _money(total), "count": n} for category, total, n in by_category
        ],
    }


@env.tool
def list_payees(db: Session, customer_id: int, currency: Currency | None = None) -> list[dict]:
    """List a customer's saved payees (external beneficiaries), sorted by name.

    Args:
        customer_id: The customer's id.
        currency: Only payees paid in this currency.
    """
    _get(db, Customer, customer_id)
    stmt = select(Payee).where(Payee.customer_id == customer_id).order_by(Payee.name, Payee.id)
    return [_public(p) for p in db.scalars(_filtered(stmt, [(currency, lambda c: Payee.currency == c)]))]


@env.tool
def list_cards(
    db: Session,
    customer_id: int,
    status: Literal["active", "blocked", "expired", "cancelled"] | None = None,
) -> list[dict]:
    """List the cards on all of a customer's accounts.

    Args:
        customer_id: The customer's id.
        status: Only cards with this status.
    """
    _get(db, Customer, customer_id)
    stmt = (
        select(Card)
        .join(Account, Card.account_id == Account.id)
        .where(Account.customer_id == customer_id)
        .order_by(Card.id)
    )
    return [_public(c) for c in db.scalars(_filtered(stmt, [(status, lambda s: Card.status == s)]))]


@env.tool(mutates=True)
def transfer_funds(
    db: Session, from_account_id: int, to_account_id: int, amount: Amount, reference: Reference | None = None
) -> dict:
    """Transfer money between two accounts at this bank, posted today.

    Both accounts must be open (not frozen or closed) and hold the same currency. The sender needs the
    amount within balance plus overdraft. Savings accounts may only send to their owner's other accounts.
    Transfers to another customer count toward the sender's daily outgoing limit.

    Args:
        from_account_id: The id of the account the money leaves.
        to_account_id: The id of the account the money goes to.
        amount: The amount, positive, at most two decimals, in the accounts' currency.
        reference: A short note shown on both statements.
    """
    if from_account_id == to_account_id:
        raise ValidationFailed(f"cannot transfer from account {from_account_id} to itself")
    sender, receiver = _get(db, Account, from_account_id), _get(db, Account, to_account_id)
    _require_open(sender, "send")
    _require_open(receiver, "receive")
    _require_same_currency(sender, receiver.currency, f"account {receiver.id}")
    own_accounts = sender.customer_id == receiver.customer_id
    if sender.type == "savings" and not own_accounts:
        raise Forbidden(f"savings account {sender.id} can only transfer to accounts of its own customer")
    cents = _cents(amount)
    _check_debit(db, sender, cents, counts_to_daily_limit=not own_accounts)
    names = (_owner_name(db, sender), _owner_name(db, receiver))
    debit, credit = transfer_entries(sender, receiver, cents, TODAY, names, reference)
    db.add_all([debit, credit])
    db.flush()
    return {"debit": _public(debit), "credit": _public(credit)}


@env.tool(mutates=True)
def pay_payee(
    db: Session, account_id: int, payee_id: int, amount: Amount, reference: Reference | None = None
) -> dict:
    """Pay one of the account owner's saved payees from a checking or business account, posted today.

    The account must be open, in the payee's currency, and cover the amount within balance plus overdraft;
    the payment counts toward the customer's daily outgoing limit.

    Args:
        account_id: The id of the paying account.
        payee_id: The id of a payee saved by the account's owner.
        amount: The amount, positive, at most two decimals, in the payee's currency.
        reference: A short note for the payee, e.g. an invoice number.
    """
    account, payee = _get(db, Account, account_id), _get(db, Payee, payee_id)
    if payee.customer_id != account.customer_id:
        raise Forbidden(
            f"payee {payee.id} belongs to customer {payee.customer_id}, "
            f"not to customer {account.customer_id} who owns account {account.id}"
        )
    _require_open(account, "send")
    if account.type == "savings":
        raise Forbidden(
            f"savings account {account.id} cannot pay payees; transfer to a checking account first"
        )
    _require_same_currency(account, payee.currency, f"payee {payee.id}")
    cents = _cents(amount)
    _check_debit(db, account, cents, counts_to_daily_limit=True)
    text = with_reference(f"Payment to {payee.name}", reference)
    payment = post_entry(account, -cents, TODAY, "payment", payee.category, text, payee_id=payee.id)
    db.add(payment)
    db.flush()
    return _public(payment)


@env.tool(mutates=True)
def add_payee(
    db: Session,
    customer_id: int,
    name: Annotated[str, Field(min_length=2, max_length=80)],
    iban: str,
    bank_name: Annotated[str, Field(min_length=2, max_length=60)],
    currency: Currency,
    category: PayeeCategory = "personal",
) -> dict:
    """Save a new payee (external beneficiary) for a customer.

    Args:
        customer_id: The customer's id.
        name: The beneficiary's name as it should appear on payments.
        iban: The beneficiary's IBAN; spaces are ignored and the check digits are verified.
        bank_name: The beneficiary's bank.
        currency: The currency payments to this payee are made in.
        category: What payments to this payee are for.
    """
    _get(db, Customer, customer_id)
    normalized = iban.replace(" ", "").upper()
    if not is_valid_iban(normalized):
        raise ValidationFailed(f"{iban!r} is not a valid IBAN (wrong format or check digits)")
    existing = db.scalar(select(Payee).where(Payee.customer_id == customer_id, Payee.iban == normalized))
    if existing is not None:
        raise Conflict(
            f"customer {customer_id} already has payee {existing.id} ({existing.name}) with IBAN {normalized}"
        )
    payee = Payee(
        customer_id=customer_id,
        name=name.strip(),
        iban=normalized,
        bank_name=bank_name.strip(),
        currency=currency,
        category=category,
        added_on=TODAY,
    )
    db.add(payee)
    db.flush()
    return _public(payee)


@env.tool(mutates=True)
def set_card_status(db: Session, card_id: int, action: Literal["block", "unblock", "cancel"]) -> dict:
    """Block, unblock or permanently cancel a card. Expired and cancelled cards cannot be changed.

    Args:
        card_id: The card's id.
        action: block (temporarily stop the card), unblock (reactivate a blocked card) or cancel (permanent).
    """
    card = _get(db, Card, card_id)
    if card.status == "cancelled":
        raise PreconditionFailed(f"card {card.id} is cancelled and can no longer be changed")
    if card.status == "expired" or card.expires_on < TODAY:
        raise PreconditionFailed(f"card {card.id} expired on {card.expires_on} and can no longer be changed")
    target = CARD_ACTIONS[action]
    if card.status == target:
        raise Conflict(f"card {card.id} is already {target}")
    if action == "unblock":
        account = _get(db, Account, card.account_id)
        if account.status != "active":
            raise Forbidden(
                f"card {card.id} cannot be unblocked while account {account.id} is {account.status}"
            )
    card.status = target
    return _public(card)


@env.tool(mutates=True)
def open_account(
    db: Session,
    customer_id: int,
    account_type: AccountType,
    currency: Currency,
    nickname: Nickname | None = None,
) -> dict:
    """Open a new account with a zero balance and no overdraft for a verified customer.

    A customer may hold at most 4 accounts that are not closed; business accounts are only for premium
    and private customers.

    Args:
        customer_id: The customer's id.
        account_type: checking, savings or business.
        currency: The account's currency.
        nickname: An optional label for the account, e.g. "Holiday savings".
    """
    customer = _get(db, Customer, customer_id)
    if customer.kyc_status != "verified":
        raise PreconditionFailed(f"customer {customer.id} has not completed identity verification (KYC)")
    if account_type == "business" and customer.tier == "standard":
        raise Forbidden(
            f"customer {customer.id} is on the standard tier; business accounts need premium or private"
        )
    held = db.scalar(
        select(func.count()).where(Account.customer_id == customer_id, Account.status != "closed")
    )
    if held >= MAX_OPEN_ACCOUNTS:
        raise LimitExceeded(
            f"customer {customer.id} already holds {held} open accounts (maximum {MAX_OPEN_ACCOUNTS})"
        )
    account_id = db.scalar(select(func.max(Account.id))) + 1
    account = Account(
        id=account_id,
        customer_id=customer_id,
        iban=account_iban(account_id),
        type=account_type,
        currency=currency,
        nickname=nickname,
        balance_cents=0,
        overdraft_limit_cents=0,
        status="active",
        opened_on=TODAY,
    )
    db.add(account)
    db.flush()
    return _account_view(account)


@env.tool(mutates=True)
def close_account(db: Session, account_id: int) -> dict:
    """Close an account whose balance is exactly zero; its remaining cards are cancelled.

    Args:
        account_id: The account's id.
    """
    account = _get(db, Account, account_id)
    if account.status == "closed":
        raise PreconditionFailed(f"account {account.id} is already closed (since {account.closed_on})")
    if account.status == "frozen":
        raise Forbidden(f"account {account.id} is frozen and cannot be closed until the freeze is lifted")
    if account.balance_cents != 0:
        raise PreconditionFailed(
            f"account {account.id} still holds {_money(account.balance_cents)} {account.currency}; "
            "its balance must be zero before it can be closed"
        )
    account.status, account.closed_on = "closed", TODAY
    cards = db.scalars(
        select(Card).where(Card.account_id == account_id, Card.status.in_(("active", "blocked")))
    )
    cancelled = []
    for card in cards:
        card.status = "cancelled"
        cancelled.append(card.id)
    return {**_account_view(account), "cancelled_card_ids": cancelled}
