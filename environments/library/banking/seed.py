"""Deterministic seed: customers across Europe, their accounts, cards, payees and 2026 transaction history.

Every balance equals the sum of its account's transactions: history starts with a "Balance brought
forward" entry on 31 December 2025 (or the opening deposit), and each later movement goes through the
ledger, which skips any debit the balance and overdraft could not cover.
"""

from __future__ import annotations

import calendar
import random
import re
from collections.abc import Callable
from datetime import date, timedelta
from functools import partial

from sqlalchemy.orm import Session

from .environment import TIER_DAILY_LIMIT_CENTS, TODAY, account_iban, env, iban_check_digits
from .ledger import can_debit, post_entry, transfer_entries
from .models import Account, Card, Customer, Payee, Transaction

CUSTOMER_COUNT = 36
PENDING_KYC = 3
FIRST_ACCOUNT_ID = 1001
HISTORY_START = date(2026, 1, 1)
SAVINGS_INTEREST_BP = 17
STANDARD_MONTHLY_FEE_CENTS = 450

FIRST_NAMES = [
    "Aoife",
    "Liam",
    "Siobhan",
    "Conor",
    "Niamh",
    "Cian",
    "Hannah",
    "Lukas",
    "Greta",
    "Jonas",
    "Camille",
    "Julien",
    "Elodie",
    "Mathis",
    "Sanne",
    "Daan",
    "Lotte",
    "Pablo",
    "Lucia",
    "Javier",
    "Marta",
    "Giulia",
    "Matteo",
    "Chiara",
    "Tiago",
    "Ines",
    "Magnus",
    "Freya",
    "Oliver",
    "Amelia",
    "Priya",
    "Arjun",
    "Yusuf",
    "Leila",
    "Tomasz",
    "Zofia",
]
LAST_NAMES = [
    "Byrne",
    "Walsh",
    "Kennedy",
    "Doyle",
    "Murphy",
    "Gallagher",
    "Schneider",
    "Fischer",
    "Weber",
    "Becker",
    "Dubois",
    "Laurent",
    "Moreau",
    "de Vries",
    "Jansen",
    "Bakker",
    "Garcia",
    "Fernandez",
    "Lopez",
    "Rossi",
    "Romano",
    "Bianchi",
    "Silva",
    "Costa",
    "Lindqvist",
    "Hansen",
    "Clarke",
    "Patel",
    "Sharma",
    "Demir",
    "Kowalski",
    "Nowak",
]
CITIES = [
    ("Dublin", "IE"),
    ("Cork", "IE"),
    ("Galway", "IE"),
    ("Limerick", "IE"),
    ("Berlin", "DE"),
    ("Munich", "DE"),
    ("Hamburg", "DE"),
    ("Paris", "FR"),
    ("Lyon", "FR"),
    ("Amsterdam", "NL"),
    ("Utrecht", "NL"),
    ("Madrid", "ES"),
    ("Valencia", "ES"),
    ("Milan", "IT"),
    ("Lisbon", "PT"),
]
PHONE_PREFIX = {"IE": "+353", "DE": "+49", "FR": "+33", "NL": "+31", "ES": "+34", "IT": "+39", "PT": "+351"}
EMAIL_DOMAINS = ["gmail.com", "outlook.com", "proton.me", "icloud.com", "yahoo.ie", "eircom.net"]
TIERS = ("standard", "premium", "private")
EMPLOYERS = [
    "Accenture",
    "Intel Ireland",
    "Siemens",
    "Allianz",
    "Kerry Group",
    "Philips",
    "Inditex",
    "Deloitte",
    "St. James's Hospital",
    "University College Dublin",
    "SAP",
    "Stripe",
    "Medtronic",
    "Aer Lingus",
]
CHECKING_OVERDRAFTS = (0, 0, 50_000, 100_000, 250_000)
BUSINESS_OVERDRAFTS = (500_000, 1_000_000)
SAVINGS_NICKNAMES = ("Rainy day fund", "House deposit", "Holiday savings", "Emergency fund", "Car fund", None)
BUSINESS_SUFFIXES = ("Consulting", "Design Studio", "Architects", "Catering", "Physiotherapy")
CLIENTS = ("Bord Gais", "Dunnes Stores", "Glanbia", "Zalando", "Booking Holdings", "Heineken", "CRH")

# (merchant, category, min cents, max cents) by account currency, plus business accounts.
MERCHANTS: dict[str, list[tuple[str, str, int, int]]] = {
    "EUR": [
        ("Tesco", "groceries", 1_200, 14_000),
        ("Lidl", "groceries", 800, 9_000),
        ("Aldi", "groceries", 900, 8_500),
        ("Carrefour", "groceries", 1_500, 12_000),
        ("Albert Heijn", "groceries", 700, 6_500),
        ("Starbucks", "dining", 350, 1_800),
        ("Deliveroo", "dining", 1_800, 5_500),
        ("Wagamama", "dining", 2_200, 7_800),
        ("Uber", "transport", 900, 4_200),
        ("Shell", "transport", 4_000, 9_500),
        ("Irish Rail", "transport", 1_500, 6_800),
        ("Amazon", "shopping", 1_100, 18_000),
        ("Zara", "shopping", 2_500, 15_000),
        ("IKEA", "shopping", 3_000, 42_000),
        ("Netflix", "entertainment", 1_399, 1_799),
        ("Spotify", "entertainment", 1_099, 1_099),
        ("Cineworld", "entertainment", 1_200, 3_600),
        ("Ryanair", "travel", 3_900, 32_000),
        ("Booking.com", "travel", 9_000, 65_000),
        ("Boots Pharmacy", "health", 600, 4_500),
    ],
    "USD": [
        ("Amazon.com", "shopping", 1_500, 12_000),
        ("Apple.com", "shopping", 99, 2_999),
        ("Uber", "transport", 900, 4_500),
        ("Marriott Hotels", "travel", 14_000, 52_000),
        ("Whole Foods", "groceries", 2_500, 16_000),
    ],
    "GBP": [
        ("Tesco", "groceries", 900, 9_000),
        ("Pret A Manger", "dining", 450, 1_500),
        ("Transport for London", "transport", 280, 2_500),
        ("John Lewis", "shopping", 2_500, 22_000),
    ],
    "business": [
        ("Viking Office Supplies", "office", 2_500, 30_000),
        ("Dell Technologies", "office", 45_000, 190_000),
        ("Google Workspace", "software", 1_380, 6_900),
        ("Adobe", "software", 2_499, 8_999),
        ("Aer Lingus", "travel", 9_000, 48_000),
    ],
}
# (bank, country, bank code); the rest of each BBAN is random digits up to the country's length.
BANKS = [
    ("Bank of Ireland", "IE", "BOFI900017"),
    ("AIB", "IE", "AIBK931152"),
    ("Deutsche Bank", "DE", "10070000"),
    ("Commerzbank", "DE", "20040000"),
    ("ING", "NL", "INGB"),
    ("Rabobank", "NL", "RABO"),
    ("BNP Paribas", "FR", "30004"),
    ("Santander", "ES", "0049"),
    ("Barclays", "GB", "BARC200000"),
]
BBAN_LENGTH = {"IE": 18, "DE": 18, "NL": 14, "FR": 23, "ES": 20, "GB": 18}
# (payee, category, bank, min cents, max cents, step cents)
BILLERS = [
    ("Electric Ireland", "utilities", "Bank of Ireland", 6_000, 16_000, 1),
    ("Vodafone", "utilities", "AIB", 2_500, 6_000, 1),
    ("Virgin Media", "utilities", "Bank of Ireland", 4_500, 8_900, 1),
    ("Flogas", "utilities", "AIB", 5_000, 14_000, 1),
    ("Irish Life Health", "insurance", "Bank of Ireland", 9_000, 18_000, 1),
    ("Allianz Insurance", "insurance", "Deutsche Bank", 4_000, 11_000, 1),
    ("Hartley Lettings", "rent", "AIB", 110_000, 220_000, 5_000),
    ("Parkside Property Management", "rent", "ING", 95_000, 190_000, 5_000),
    ("Inmobiliaria Sol", "rent", "Santander", 80_000, 150_000, 5_000),
]


def _day_between(rng: random.Random, first: date, last: date) -> date:
    return first + timedelta(days=rng.randint(0, max((last - first).days, 0)))


def _month_end(year: int, month: int) -> date:
    return date(year, month, calendar.monthrange(year, month)[1])


def _external_iban(rng: random.Random, bank: str) -> str:
    country, code = next((c, k) for name, c, k in BANKS if name == bank)
    bban = code + "".join(str(rng.randint(0, 9)) for _ in range(BBAN_LENGTH[country] - len(code)))
    return f"{country}{iban_check_digits(country, bban)}{bban}"


def _customers(rng: random.Random) -> list[Customer]:
    people = rng.sample([(f, la) for f in FIRST_NAMES for la in LAST_NAMES], CUSTOMER_COUNT)
    rows = []
    for cid, (first, last) in enumerate(people, start=1):
        city, country = rng.choice(CITIES)
        pending = cid > CUSTOMER_COUNT - PENDING_KYC
        since = (
            _day_between(rng, date(2026, 5, 1), date(2026, 6, 10))
            if pending
            else _day_between(rng, date(2011, 1, 1), date(2025, 9, 30))
        )
        tier = rng.choices(TIERS, weights=(6, 3, 1))[0]
        local_part = re.sub("[^a-z.]", "", f"{first}.{last}".lower())
        rows.append(
            Customer(
                id=cid,
                first_name=first,
                last_name=last,
                email=f"{local_part}@{rng.choice(EMAIL_DOMAINS)}",
                phone=f"{PHONE_PREFIX[country]} {rng.randint(80, 89)} {rng.randint(1_000_000, 9_999_999)}",
                city=city,
                country=country,
                date_of_birth=_day_between(rng, date(1952, 1, 1), date(2005, 12, 31)),
                customer_since=since,
                tier=tier,
                kyc_status="pending" if pending else "verified",
                daily_transfer_limit_cents=TIER_DAILY_LIMIT_CENTS[tier],
            )
        )
    return rows


def _accounts(rng: random.Random, customers: list[Customer]) -> list[Account]:
    rows: list[Account] = []

    def add(customer: Customer, kind: str, currency: str, overdraft: int, nickname: str | None) -> None:
        account_id = FIRST_ACCOUNT_ID + len(rows)
        primary = kind == "checking" and currency == "EUR"
        opened = (
            customer.customer_since
            if primary
            else _day_between(rng, customer.customer_since, date(2026, 4, 30))
        )
        rows.append(
            Account(
                id=account_id,
                customer_id=customer.id,
                iban=account_iban(account_id),
                type=kind,
                currency=currency,
                nickname=nickname,
                balance_cents=0,
                overdraft_limit_cents=overdraft,
                status="active",
                opened_on=opened,
            )
        )

    for customer in customers:
        add(customer, "checking", "EUR", rng.choice(CHECKING_OVERDRAFTS), None)
        if customer.kyc_status == "pending":
            continue
        if rng.random() < 0.6:
            add(customer, "savings", "EUR", 0, rng.choice(SAVINGS_NICKNAMES))
        if rng.random() < 0.25:
            currency = rng.choice(("USD", "GBP"))
            add(customer, "checking", currency, 0, f"{currency} spending")
        if customer.tier != "standard" and rng.random() < 0.5:
            business = f"{customer.last_name} {rng.choice(BUSINESS_SUFFIXES)}"
            add(customer, "business", "EUR", rng.choice(BUSINESS_OVERDRAFTS), business)
    return rows


def _set_statuses(rng: random.Random, accounts: list[Account], customers: list[Customer]) -> dict[int, date]:
    """Close three older secondary accounts and freeze three more; return each account's last active day."""
    verified = {c.id for c in customers if c.kyc_status == "verified"}
    primaries = [
        a for a in accounts if a.type == "checking" and a.currency == "EUR" and a.customer_id in verified
    ]
    secondary = [
        a for a in accounts if a not in primaries and a.type != "business" and a.customer_id in verified
    ]
    last_active = {a.id: TODAY for a in accounts}
    for account in rng.sample([a for a in secondary if a.opened_on < HISTORY_START], 3):
        account.status = "closed"
        account.closed_on = _day_between(rng, date(2026, 2, 1), date(2026, 5, 31))
        last_active[account.id] = account.closed_on - timedelta(days=1)
    open_secondary = [a for a in secondary if a.status == "active"]
    for account in rng.sample(primaries, 2) + rng.sample(open_secondary, 1):
        account.status = "frozen"
        last_active[account.id] = _day_between(rng, date(2026, 4, 1), date(2026, 6, 1))
    return last_active


def _expiry(issued: date) -> date:
    return _month_end(issued.year + 4, issued.month)


def _cards(rng: random.Random, accounts: list[Account]) -> list[Card]:
    rows: list[Card] = []

    def add(account: Account, form: str, issued: date, status: str) -> None:
        network = rng.choice(("Visa", "Mastercard"))
        last4 = f"{rng.randint(0, 9999):04d}"
        card = Card(
            id=len(rows) + 1,
            account_id=account.id,
            last4=last4,
            network=network,
            form=form,
            status=status,
            issued_on=issued,
            expires_on=_expiry(issued),
        )
        rows.append(card)

    for account in accounts:
        if account.type == "savings":
            continue
        status = {"closed": "cancelled", "frozen": "blocked"}.get(account.status, "active")
        issued = _day_between(
            rng, max(account.opened_on, date(2022, 7, 1)), max(account.opened_on, date(2026, 3, 31))
        )
        if account.opened_on < date(2021, 1, 1) and rng.random() < 0.35:
            old_issue = _day_between(rng, date(2021, 1, 1), date(2022, 4, 30))
            add(account, "physical", old_issue, "expired")
            issued = _expiry(old_issue) - timedelta(days=20)
        add(account, "physical", issued, status)
        if rng.random() < 0.3:
            add(
                account, "virtual", _day_between(rng, max(account.opened_on, date(2024, 1, 1)), TODAY), status
            )
    for form, status, count in (("physical", "blocked", 3), ("virtual", "cancelled", 2)):
        for card in rng.sample([c for c in rows if c.status == "active" and c.form == form], count):
            card.status = status
    return rows


def _payees(
    rng: random.Random, customers: list[Customer]
) -> tuple[list[Payee], dict[int, tuple[int, int, int]]]:
    """Payees of every customer and, per payee, the (min, max, step) cents of its usual payment."""
    rows: list[Payee] = []
    amounts: dict[int, tuple[int, int, int]] = {}

    def add(customer: Customer, name: str, category: str, bank: str, currency: str) -> Payee:
        added = _day_between(rng, customer.customer_since, max(customer.customer_since, date(2025, 12, 31)))
        payee = Payee(
            id=len(rows) + 1,
            customer_id=customer.id,
            name=name,
            iban=_external_iban(rng, bank),
            bank_name=bank,
            currency=currency,
            category=category,
            added_on=added,
        )
        rows.append(payee)
        return payee

    for customer in customers:
        verified = customer.kyc_status == "verified"
        billers = [b for b in BILLERS if b[1] != "rent"]
        chosen = rng.sample(billers, rng.randint(1, 3) if verified else rng.randint(0, 1))
        if verified and rng.random() < 0.6:
            chosen.append(rng.choice([b for b in BILLERS if b[1] == "rent"]))
        for name, category, bank, low, high, step in chosen:
            amounts[add(customer, name, category, bank, "EUR").id] = (low, high, step)
        for _ in range(rng.randint(0, 2) if verified else 0):
            bank = rng.choice([b[0] for b in BANKS])
            friend = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
            currency = "GBP" if bank == "Barclays" else "EUR"
            amounts[add(customer, friend, "personal", bank, currency).id] = (2_000, 25_000, 500)
    return rows, amounts


class _Ledger:
    """Plans dated movements, then posts them in date order so balances and overdrafts stay consistent.

    A movement is planned only if every account involved is open that day; a debit the balance plus
    overdraft cannot cover when its turn comes is dropped.
    """

    def __init__(
        self, accounts: list[Account], owner_names: dict[int, str], last_active: dict[int, date]
    ) -> None:
        self.accounts = {a.id: a for a in accounts}
        self.owner_names = owner_names
        self.last_active = last_active
        self.rows: list[Transaction] = []
        self._planned: list[tuple[date, int, Callable[[], None]]] = []

    def plan_entry(
        self, on: date, account_id: int, amount: int, kind: str, category: str, text: str, **refs: int
    ) -> None:
        self._plan(on, (account_id,), partial(self._post, account_id, amount, on, kind, category, text, refs))

    def plan_transfer(
        self, on: date, sender_id: int, receiver_id: int, amount: int, reference: str | None = None
    ) -> None:
        self._plan(
            on,
            (sender_id, receiver_id),
            partial(self._transfer, sender_id, receiver_id, amount, on, reference),
        )

    def plan_interest(self, on: date, account_id: int) -> None:
        self._plan(on, (account_id,), partial(self._interest, account_id, on))

    def plan_closure(self, account: Account) -> None:
        """Pay out the whole balance on the day ``account`` closes (the day after its last active day)."""
        on = account.closed_on or TODAY
        self._planned.append((on, len(self._planned), partial(self._pay_out, account.id, on)))

    def run(self) -> list[Transaction]:
        for _on, _seq, action in sorted(self._planned, key=lambda item: item[:2]):
            action()
        return self.rows

    def _plan(self, on: date, account_ids: tuple[int, ...], action: Callable[[], None]) -> None:
        if all(self.accounts[a].opened_on <= on <= self.last_active[a] for a in account_ids):
            self._planned.append((on, len(self._planned), action))

    def _post(
        self,
        account_id: int,
        amount: int,
        on: date,
        kind: str,
        category: str,
        text: str,
        refs: dict[str, int],
    ) -> None:
        account = self.accounts[account_id]
        if amount > 0 or can_debit(account, -amount):
            txn_id = len(self.rows) + 1
            self.rows.append(post_entry(account, amount, on, kind, category, text, txn_id=txn_id, **refs))

    def _transfer(
        self, sender_id: int, receiver_id: int, amount: int, on: date, reference: str | None
    ) -> None:
        sender, receiver = self.accounts[sender_id], self.accounts[receiver_id]
        if can_debit(sender, amount):
            names = (self.owner_names[sender_id], self.owner_names[receiver_id])
            ids = (len(self.rows) + 1, len(self.rows) + 2)
            self.rows.extend(transfer_entries(sender, receiver, amount, on, names, reference, ids))

    def _interest(self, account_id: int, on: date) -> None:
        amount = self.accounts[account_id].balance_cents * SAVINGS_INTEREST_BP // 10_000
        if amount > 0:
            self._post(account_id, amount, on, "interest", "interest", "Monthly interest", {})

    def _pay_out(self, account_id: int, on: date) -> None:
        balance = self.accounts[account_id].balance_cents
        if balance > 0:
            self._post(
                account_id, -balance, on, "withdrawal", "closure", "Account closure - balance paid out", {}
            )


class _History:
    """Plans 2026 activity: salaries, card spending, bills, cash, savings, business income, peer transfers."""

    def __init__(
        self,
        rng: random.Random,
        customers: list[Customer],
        accounts: list[Account],
        cards: list[Card],
        payees: tuple[list[Payee], dict[int, tuple[int, int, int]]],
        last_active: dict[int, date],
    ) -> None:
        self.rng = rng
        self.customers = customers
        self.accounts = accounts
        self.cards = cards
        self.payees, self.payee_amounts = payees
        self.verified = {c.id for c in customers if c.kyc_status == "verified"}
        names = {c.id: f"{c.first_name} {c.last_name}" for c in customers}
        self.ledger = _Ledger(accounts, {a.id: names[a.customer_id] for a in accounts}, last_active)

    def build(self) -> list[Transaction]:
        for account in self.accounts:
            self._opening(account)
        for customer in self.customers:
            own = [a for a in self.accounts if a.customer_id == customer.id]
            salary, employer = self.rng.randrange(220_000, 750_000, 100), self.rng.choice(EMPLOYERS)
            for month in range(1, TODAY.month + 1):
                self._purchases(own[0], "EUR", self.rng.randint(2, 5), month)
                if customer.id in self.verified:
                    self._household_month(customer, own, month, salary, employer)
        self._peer_transfers()
        return self.ledger.run()

    def _day_in(self, month: int, last_day: int | None = None) -> date:
        return _day_between(
            self.rng, date(2026, month, 1), date(2026, month, last_day or _month_end(2026, month).day)
        )

    def _opening(self, account: Account) -> None:
        if account.opened_on < HISTORY_START:
            amount, on, text = (
                _opening_amount(self.rng, account),
                HISTORY_START - timedelta(days=1),
                "Balance brought forward",
            )
        else:
            amount, on, text = self.rng.randrange(10_000, 300_000, 500), account.opened_on, "Initial deposit"
        self.ledger.plan_entry(on, account.id, amount, "deposit", "deposit", text)
        if account.status == "closed":
            self.ledger.plan_closure(account)

    def _purchases(self, account: Account, merchants: str, count: int, month: int) -> None:
        for _ in range(count):
            day = self._day_in(month)
            card = next(
                (c for c in self.cards if c.account_id == account.id and c.issued_on <= day <= c.expires_on),
                None,
            )
            if card is not None:
                merchant, category, low, high = self.rng.choice(MERCHANTS[merchants])
                amount = -self.rng.randint(low, high)
                self.ledger.plan_entry(
                    day, account.id, amount, "card_purchase", category, merchant, card_id=card.id
                )

    def _household_month(
        self, customer: Customer, own: list[Account], month: int, salary: int, employer: str
    ) -> None:
        primary, rng, ledger = own[0], self.rng, self.ledger
        ledger.plan_entry(
            date(2026, month, 25), primary.id, salary, "deposit", "income", f"Salary {employer}"
        )
        if rng.random() < 0.5:
            day, amount = self._day_in(month), -rng.randrange(2_000, 32_000, 2_000)
            ledger.plan_entry(
                day, primary.id, amount, "withdrawal", "cash", f"ATM withdrawal {customer.city}"
            )
        if customer.tier == "standard":
            ledger.plan_entry(
                date(2026, month, 28),
                primary.id,
                -STANDARD_MONTHLY_FEE_CENTS,
                "fee",
                "fees",
                "Monthly account fee",
            )
        savings = next((a for a in own if a.type == "savings"), None)
        if savings is not None:
            amount = rng.randrange(10_000, 80_001, 5_000)
            ledger.plan_transfer(date(2026, month, 26), primary.id, savings.id, amount, "Savings")
            ledger.plan_interest(_month_end(2026, month), savings.id)
        for payee in (p for p in self.payees if p.customer_id == customer.id and p.currency == "EUR"):
            low, high, step = self.payee_amounts[payee.id]
            if payee.category != "personal" or rng.random() < 0.3:
                day, amount = self._day_in(month, 12), -rng.randrange(low, high + 1, step)
                ledger.plan_entry(
                    day,
                    primary.id,
                    amount,
                    "payment",
                    payee.category,
                    f"Payment to {payee.name}",
                    payee_id=payee.id,
                )
        for account in own[1:]:
            if account.type == "business":
                self._business_month(account, primary, month)
            elif account.type == "checking":
                self._purchases(account, account.currency, rng.randint(0, 3), month)

    def _business_month(self, account: Account, primary: Account, month: int) -> None:
        for _ in range(self.rng.randint(1, 3)):
            day, amount = self._day_in(month), self.rng.randrange(80_000, 650_000, 100)
            client = self.rng.choice(CLIENTS)
            self.ledger.plan_entry(day, account.id, amount, "deposit", "income", f"Client payment {client}")
        self._purchases(account, "business", self.rng.randint(1, 3), month)
        drawings = self.rng.randrange(100_000, 300_001, 10_000)
        self.ledger.plan_transfer(date(2026, month, 27), account.id, primary.id, drawings, "Owner drawings")

    def _peer_transfers(self) -> None:
        """Thirty transfers between customers' main accounts, five of them today."""
        primaries = [
            a
            for a in self.accounts
            if a.type == "checking" and a.currency == "EUR" and a.customer_id in self.verified
        ]
        for index in range(30):
            sender, receiver = self.rng.sample(primaries, 2)
            on = TODAY if index < 5 else _day_between(self.rng, HISTORY_START, TODAY)
            amount = self.rng.randrange(2_000, 60_001, 500)
            reference = self.rng.choice(("Dinner", "Rent share", "Concert tickets", "Birthday gift", None))
            self.ledger.plan_transfer(on, sender.id, receiver.id, amount, reference)


def _opening_amount(rng: random.Random, account: Account) -> int:
    low, high = {"savings": (200_000, 4_000_000), "business": (500_000, 6_000_000)}.get(
        account.type, (50_000, 600_000)
    )
    return rng.randrange(low, high, 100)


@env.seeder
def seed(db: Session, rng: random.Random) -> None:
    """Build customers, accounts, cards, payees and their transaction history from ``rng`` alone."""
    customers = _customers(rng)
    accounts = _accounts(rng, customers)
    last_active = _set_statuses(rng, accounts, customers)
    cards = _cards(rng, accounts)
    payees = _payees(rng, customers)
    transactions = _History(rng, customers, accounts, cards, payees, last_active).build()
    for rows in (customers, accounts, cards, payees[0], transactions):
        db.add_all(rows)
        db.flush()
