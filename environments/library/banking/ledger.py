"""Posting money movements: every balance change goes through one ledger entry."""

from __future__ import annotations

from datetime import date

from .models import Account, Transaction


def can_debit(account: Account, amount_cents: int) -> bool:
    """Whether ``account`` can pay ``amount_cents`` out of its balance plus overdraft."""
    return account.balance_cents - amount_cents >= -account.overdraft_limit_cents


def post_entry(
    account: Account,
    amount_cents: int,
    posted_on: date,
    kind: str,
    category: str,
    description: str,
    *,
    txn_id: int | None = None,
    counterparty_account_id: int | None = None,
    payee_id: int | None = None,
    card_id: int | None = None,
) -> Transaction:
    """Apply a signed amount to ``account`` and return the matching transaction row."""
    account.balance_cents += amount_cents
    return Transaction(
        id=txn_id,
        account_id=account.id,
        posted_on=posted_on,
        kind=kind,
        category=category,
        description=description[:120],
        amount_cents=amount_cents,
        balance_after_cents=account.balance_cents,
        counterparty_account_id=counterparty_account_id,
        payee_id=payee_id,
        card_id=card_id,
    )


def with_reference(text: str, reference: str | None) -> str:
    """A transaction description with the payer's optional reference appended."""
    return f"{text} - {reference}" if reference else text


def transfer_entries(
    sender: Account,
    receiver: Account,
    amount_cents: int,
    posted_on: date,
    names: tuple[str, str],
    reference: str | None = None,
    txn_ids: tuple[int | None, int | None] = (None, None),
) -> tuple[Transaction, Transaction]:
    """The debit and credit legs of a transfer; ``names`` are the sender's and receiver's owners."""
    debit = post_entry(
        sender,
        -amount_cents,
        posted_on,
        "transfer_out",
        "transfer",
        with_reference(f"Transfer to {names[1]}", reference),
        txn_id=txn_ids[0],
        counterparty_account_id=receiver.id,
    )
    credit = post_entry(
        receiver,
        amount_cents,
        posted_on,
        "transfer_in",
        "transfer",
        with_reference(f"Transfer from {names[0]}", reference),
        txn_id=txn_ids[1],
        counterparty_account_id=sender.id,
    )
    return debit, credit
