"""The ``banking`` environment object and the bank's fixed parameters."""

from __future__ import annotations

import re
from datetime import date

from environments.sdk import Environment

from .models import Base

TODAY = date(2026, 6, 15)
"""The simulated current date; every date rule uses it."""

HOME_CURRENCY = "EUR"
EUR_RATE_BP = {"EUR": 10_000, "USD": 9_200, "GBP": 11_700}
"""Fixed reference rates (basis points of one EUR per unit) used to count transfers against daily limits."""

TIER_DAILY_LIMIT_CENTS = {"standard": 500_000, "premium": 1_500_000, "private": 5_000_000}
MAX_OPEN_ACCOUNTS = 4
BANK_CODE = "ARNA"
SORT_CODE = "931027"
IBAN_SHAPE = re.compile(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}")

env = Environment(
    "banking",
    theme="retail banking: accounts, payments and cards",
    category="finance",
    description=(
        "A retail bank's back office: look up customers, accounts, cards and transaction history; "
        "move money between accounts and to saved payees within balance, overdraft and daily limits; "
        "open and close accounts; block, unblock and cancel cards."
    ),
    base=Base,
    version="1",
)


def iban_check_digits(country: str, bban: str) -> str:
    """The two ISO 13616 check digits for ``country`` + ``bban`` (mod-97)."""
    digits = "".join(str(int(ch, 36)) for ch in bban + country + "00")
    return f"{98 - int(digits) % 97:02d}"


def is_valid_iban(iban: str) -> bool:
    """Whether ``iban`` (upper case, no spaces) passes the ISO 13616 mod-97 check."""
    if not IBAN_SHAPE.fullmatch(iban):
        return False
    return iban[2:4] == iban_check_digits(iban[:2], iban[4:])


def account_iban(account_id: int) -> str:
    """The IBAN of one of the bank's own accounts."""
    bban = f"{BANK_CODE}{SORT_CODE}{account_id:08d}"
    return f"IE{iban_check_digits('IE', bban)}{bban}"
