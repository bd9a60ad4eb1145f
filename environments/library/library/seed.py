"""Deterministic seed data: six branches, a real-world catalogue, members and a year of circulation."""

from __future__ import annotations

import random
from collections import Counter
from datetime import date, timedelta

from sqlalchemy.orm import Session

from .core import (
    ACTIVE_HOLD,
    DAMAGE_FEE,
    FINE_BLOCK_THRESHOLD,
    LOAN_DAYS,
    MAX_ACTIVE_HOLDS,
    MAX_ACTIVE_LOANS,
    RENEWAL_DAYS,
    TODAY,
    env,
    overdue_fine,
)
from .models import Book, Branch, Copy, Fine, Hold, Loan, Member

BRANCHES = [
    ("CEN", "Central Library", "Riverside", "401 Main Street", "(951) 555-0140"),
    ("NGT", "Northgate Branch", "Riverside", "1280 Northgate Avenue", "(951) 555-0171"),
    ("EST", "Eastside Branch", "Riverside", "3350 University Avenue", "(951) 555-0192"),
    ("HBR", "Harbor View Branch", "Port Alden", "22 Wharf Road", "(951) 555-0233"),
    ("OAK", "Oak Park Branch", "Oak Park", "915 Elm Street", "(951) 555-0268"),
    ("MLB", "Millbrook Branch", "Millbrook", "7 Mill Lane", "(951) 555-0295"),
]

BOOKS = [
    ("To Kill a Mockingbird", "Harper Lee", "fiction", 1960),
    ("The Great Gatsby", "F. Scott Fitzgerald", "fiction", 1925),
    ("Beloved", "Toni Morrison", "fiction", 1987),
    ("One Hundred Years of Solitude", "Gabriel Garcia Marquez", "fiction", 1967),
    ("The Remains of the Day", "Kazuo Ishiguro", "fiction", 1989),
    ("The Road", "Cormac McCarthy", "fiction", 2006),
    ("Middlemarch", "George Eliot", "fiction", 1871),
    ("Things Fall Apart", "Chinua Achebe", "fiction", 1958),
    ("The Kite Runner", "Khaled Hosseini", "fiction", 2003),
    ("Life of Pi", "Yann Martel", "fiction", 2001),
    ("Americanah", "Chimamanda Ngozi Adichie", "fiction", 2013),
    ("The Goldfinch", "Donna Tartt", "fiction", 2013),
    ("Lessons in Chemistry", "Bonnie Garmus", "fiction", 2022),
    ("Pride and Prejudice", "Jane Austen", "romance", 1813),
    ("Jane Eyre", "Charlotte Bronte", "romance", 1847),
    ("Outlander", "Diana Gabaldon", "romance", 1991),
    ("Me Before You", "Jojo Moyes", "romance", 2012),
    ("The Murder of Roger Ackroyd", "Agatha Christie", "mystery", 1926),
    ("And Then There Were None", "Agatha Christie", "mystery", 1939),
    ("The Hound of the Baskervilles", "Arthur Conan Doyle", "mystery", 1902),
    ("The Big Sleep", "Raymond Chandler", "mystery", 1939),
    ("Gone Girl", "Gillian Flynn", "mystery", 2012),
    ("The Girl with the Dragon Tattoo", "Stieg Larsson", "mystery", 2005),
    ("In the Woods", "Tana French", "mystery", 2007),
    ("The Thursday Murder Club", "Richard Osman", "mystery", 2020),
    ("Big Little Lies", "Liane Moriarty", "mystery", 2014),
    ("Dune", "Frank Herbert", "science fiction", 1965),
    ("The Left Hand of Darkness", "Ursula K. Le Guin", "science fiction", 1969),
    ("Foundation", "Isaac Asimov", "science fiction", 1951),
    ("Neuromancer", "William Gibson", "science fiction", 1984),
    ("The Martian", "Andy Weir", "science fiction", 2011),
    ("Project Hail Mary", "Andy Weir", "science fiction", 2021),
    ("Kindred", "Octavia E. Butler", "science fiction", 1979),
    ("The Three-Body Problem", "Liu Cixin", "science fiction", 2008),
    ("Nineteen Eighty-Four", "George Orwell", "science fiction", 1949),
    ("Fahrenheit 451", "Ray Bradbury", "science fiction", 1953),
    ("Never Let Me Go", "Kazuo Ishiguro", "science fiction", 2005),
    ("The Hobbit", "J. R. R. Tolkien", "fantasy", 1937),
    ("A Wizard of Earthsea", "Ursula K. Le Guin", "fantasy", 1968),
    ("The Name of the Wind", "Patrick Rothfuss", "fantasy", 2007),
    ("Mistborn: The Final Empire", "Brandon Sanderson", "fantasy", 2006),
    ("Circe", "Madeline Miller", "fantasy", 2018),
    ("Piranesi", "Susanna Clarke", "fantasy", 2020),
    ("Jonathan Strange & Mr Norrell", "Susanna Clarke", "fantasy", 2004),
    ("Guns, Germs, and Steel", "Jared Diamond", "history", 1997),
    ("Sapiens: A Brief History of Humankind", "Yuval Noah Harari", "history", 2011),
    ("The Guns of August", "Barbara W. Tuchman", "history", 1962),
    ("SPQR: A History of Ancient Rome", "Mary Beard", "history", 2015),
    ("The Silk Roads", "Peter Frankopan", "history", 2015),
    ("The Warmth of Other Suns", "Isabel Wilkerson", "history", 2010),
    ("A Brief History of Time", "Stephen Hawking", "science", 1988),
    ("The Selfish Gene", "Richard Dawkins", "science", 1976),
    ("Cosmos", "Carl Sagan", "science", 1980),
    ("The Immortal Life of Henrietta Lacks", "Rebecca Skloot", "science", 2010),
    ("The Gene: An Intimate History", "Siddhartha Mukherjee", "science", 2016),
    ("Silent Spring", "Rachel Carson", "science", 1962),
    ("Steve Jobs", "Walter Isaacson", "biography", 2011),
    ("Becoming", "Michelle Obama", "biography", 2018),
    ("Educated", "Tara Westover", "biography", 2018),
    ("The Diary of a Young Girl", "Anne Frank", "biography", 1947),
    ("Long Walk to Freedom", "Nelson Mandela", "biography", 1994),
    ("I Know Why the Caged Bird Sings", "Maya Angelou", "biography", 1969),
    ("Charlotte's Web", "E. B. White", "children", 1952),
    ("Matilda", "Roald Dahl", "children", 1988),
    ("Where the Wild Things Are", "Maurice Sendak", "children", 1963),
    ("The Lion, the Witch and the Wardrobe", "C. S. Lewis", "children", 1950),
    ("Harry Potter and the Philosopher's Stone", "J. K. Rowling", "children", 1997),
    ("Wonder", "R. J. Palacio", "children", 2012),
    ("Leaves of Grass", "Walt Whitman", "poetry", 1855),
    ("Ariel", "Sylvia Plath", "poetry", 1965),
    ("Milk and Honey", "Rupi Kaur", "poetry", 2014),
    ("The Sun and Her Flowers", "Rupi Kaur", "poetry", 2017),
]

FIRST_NAMES = [
    "Olivia", "Liam", "Emma", "Noah", "Ava", "Mateo", "Sophia", "Ethan", "Isabella", "Lucas",
    "Mia", "Aiden", "Amelia", "Daniel", "Harper", "Samuel", "Priya", "Wei", "Fatima", "Kenji",
    "Chloe", "Omar", "Grace", "Diego", "Hannah", "Ravi", "Zoe", "Jamal", "Elena", "Tomas",
]  # fmt: skip
LAST_NAMES = [
    "Garcia", "Smith", "Nguyen", "Johnson", "Patel", "Kim", "Martinez", "Brown", "Okafor", "Chen",
    "Williams", "Lopez", "Davis", "Hernandez", "Wilson", "Anderson", "Thomas", "Moore", "Jackson", "Lee",
    "Rossi", "Schmidt", "Tanaka", "Murphy", "Cohen", "Silva", "Walker", "Young", "Khan", "Rivera",
]  # fmt: skip
EMAIL_DOMAINS = ["gmail.com", "outlook.com", "yahoo.com", "icloud.com", "proton.me", "riverside.edu"]
REPLACEMENT_COSTS = [18.99, 24.50, 29.95, 34.00]
MEMBER_COUNT = 60
HISTORY_START = date(2025, 7, 1)


def _isbn13(rng: random.Random) -> str:
    """A random ISBN-13 with the 978 prefix and a valid check digit."""
    digits = [9, 7, 8, *(rng.randint(0, 9) for _ in range(9))]
    check = -sum(d * (3 if i % 2 else 1) for i, d in enumerate(digits)) % 10
    return "".join(map(str, digits)) + str(check)


def _days(n: int) -> timedelta:
    return timedelta(days=n)


def _catalogue(rng: random.Random) -> tuple[list[Book], list[Copy]]:
    """Books and their copies: one to four copies per book, each at a different branch."""
    books, copies = [], []
    branch_ids = [b[0] for b in BRANCHES]
    for book_id, (title, author, genre, year) in enumerate(BOOKS, start=1):
        book = Book(
            id=book_id,
            isbn=_isbn13(rng),
            title=title,
            author=author,
            genre=genre,
            year=year,
            pages=rng.randint(32, 96) if genre in ("children", "poetry") else rng.randint(180, 720),
        )
        books.append(book)
        first_day = date(max(year, 2008), 3, 1)
        for branch_id in rng.sample(branch_ids, rng.choice([1, 2, 2, 3, 3, 4])):
            roll = rng.random()
            status = "lost" if roll < 0.04 else "repair" if roll < 0.09 else "available"
            acquired = first_day + _days(rng.randint(0, (date(2025, 3, 1) - first_day).days))
            copies.append(
                Copy(
                    id=31001 + len(copies),
                    book_id=book_id,
                    branch_id=branch_id,
                    status=status,
                    acquired_on=acquired,
                )
            )
    return books, copies


def _members(rng: random.Random) -> list[Member]:
    """Members with unique names; about one in ten has an expired membership."""
    names = rng.sample([(f, last) for f in FIRST_NAMES for last in LAST_NAMES], MEMBER_COUNT)
    members = []
    for member_id, (first, last) in enumerate(names, start=1):
        branch = rng.choice(BRANCHES)
        joined = date(2012, 1, 1) + _days(rng.randint(0, 4800))
        expires = (
            TODAY - _days(rng.randint(10, 150)) if rng.random() < 0.1 else TODAY + _days(rng.randint(30, 900))
        )
        email = f"{first}.{last}@{rng.choice(EMAIL_DOMAINS)}".lower()
        members.append(
            Member(
                id=member_id,
                name=f"{first} {last}",
                email=email,
                city=branch[2],
                home_branch_id=branch[0],
                joined_on=joined,
                expires_on=expires,
            )
        )
    return members


@env.seeder
def seed(db: Session, rng: random.Random) -> None:
    """A year of lending history, then today's loans and hold queue, all consistent with copy statuses."""
    books, copies = _catalogue(rng)
    members = _members(rng)
    loans: list[Loan] = []
    fines: list[Fine] = []

    def add_fine(member_id: int, loan_id: int | None, reason: str, amount: float, issued: date) -> None:
        paid = issued + _days(rng.randint(0, 40))
        paid_on = paid if rng.random() < 0.8 and paid <= TODAY else None
        fines.append(
            Fine(
                id=len(fines) + 1,
                member_id=member_id,
                loan_id=loan_id,
                reason=reason,
                amount=amount,
                issued_on=issued,
                paid_on=paid_on,
            )
        )

    # Past loans: each copy circulates back to back, with no overlap, until three months ago.
    for copy in copies:
        day = HISTORY_START + _days(rng.randint(0, 40))
        last: Loan | None = None
        while (start := day + _days(rng.randint(3, 60))) <= TODAY - _days(90):
            member = rng.choice([m for m in members if m.joined_on <= start < m.expires_on])
            kept = rng.randint(45, 90) if rng.random() < 0.08 else rng.randint(3, 40)
            renewals = 1 if kept > LOAN_DAYS and rng.random() < 0.5 else 0
            due = start + _days(LOAN_DAYS + renewals * RENEWAL_DAYS)
            day = start + _days(kept)
            last = Loan(
                id=len(loans) + 1,
                copy_id=copy.id,
                member_id=member.id,
                loaned_on=start,
                due_on=due,
                returned_on=day,
                renewals=renewals,
            )
            loans.append(last)
            if day > due:
                add_fine(member.id, last.id, "overdue", overdue_fine((day - due).days), day)
        if copy.status == "repair" and last is not None:
            add_fine(last.member_id, last.id, "damaged item", DAMAGE_FEE, day)
        if copy.status == "lost":
            add_fine(rng.choice(members).id, None, "lost item", rng.choice(REPLACEMENT_COSTS), day)

    # Members allowed to borrow today: a current card and unpaid fines within the limit.
    unpaid = Counter[int]()
    for fine in fines:
        unpaid[fine.member_id] += fine.amount if fine.paid_on is None else 0
    eligible = [m for m in members if m.expires_on >= TODAY and unpaid[m.id] <= FINE_BLOCK_THRESHOLD]

    # Current loans: about a third of the shelf is out, some of it overdue.
    active = Counter[int]()
    for copy in copies:
        if copy.status != "available" or rng.random() > 0.35:
            continue
        start = TODAY - _days(rng.randint(1, 50))
        member = rng.choice([m for m in eligible if active[m.id] < MAX_ACTIVE_LOANS])
        renewals = rng.choice([0, 0, 0, 1, 2])
        due = start + _days(LOAN_DAYS + renewals * RENEWAL_DAYS)
        loans.append(
            Loan(
                id=len(loans) + 1,
                copy_id=copy.id,
                member_id=member.id,
                loaned_on=start,
                due_on=due,
                returned_on=None,
                renewals=renewals,
            )
        )
        copy.status = "on_loan"
        active[member.id] += 1

    holds = _holds(rng, books, copies, eligible, loans)
    # Parents before children: the database enforces foreign keys on every insert.
    db.add_all([Branch(id=b[0], name=b[1], city=b[2], address=b[3], phone=b[4]) for b in BRANCHES])
    db.add_all([*books, *members])
    db.flush()
    db.add_all(copies)
    db.flush()
    db.add_all([*loans, *holds])
    db.flush()
    db.add_all(fines)


def _holds(
    rng: random.Random, books: list[Book], copies: list[Copy], members: list[Member], loans: list[Loan]
) -> list[Hold]:
    """Past holds, copies waiting on the shelf for pickup, and queues on books with no copy available.

    ``members`` are those allowed to place holds today (current card, fines within the limit).
    """
    book_of = {c.id: c.book_id for c in copies}
    borrowing = {(loan.member_id, book_of[loan.copy_id]) for loan in loans if loan.returned_on is None}
    holds: list[Hold] = []
    held = Counter[int]()

    def add(
        book_id: int, member: Member, branch_id: str, placed: date, status: str, copy: Copy | None
    ) -> None:
        holds.append(
            Hold(
                id=len(holds) + 1,
                book_id=book_id,
                member_id=member.id,
                pickup_branch_id=branch_id,
                placed_on=placed,
                status=status,
                copy_id=copy.id if copy else None,
            )
        )
        if status in ACTIVE_HOLD:
            held[member.id] += 1
            borrowing.add((member.id, book_id))

    for _ in range(24):
        copy = rng.choice(copies)
        status = rng.choice(["fulfilled", "fulfilled", "cancelled"])
        add(
            copy.book_id,
            rng.choice(members),
            copy.branch_id,
            date(2025, 8, 1) + _days(rng.randint(0, 240)),
            status,
            copy if status == "fulfilled" else None,
        )

    unavailable = [b.id for b in books if all(c.status != "available" for c in copies if c.book_id == b.id)]
    shelf = [c for c in copies if c.status == "available"]
    for copy in rng.sample(shelf, 7):
        member = rng.choice([m for m in members if (m.id, copy.book_id) not in borrowing])
        add(copy.book_id, member, copy.branch_id, TODAY - _days(rng.randint(2, 12)), "ready", copy)
        copy.status = "on_hold"

    for _ in range(30):
        book_id = rng.choice(unavailable)
        member = rng.choice(members)
        if (member.id, book_id) in borrowing or held[member.id] >= MAX_ACTIVE_HOLDS:
            continue
        add(book_id, member, member.home_branch_id, TODAY - _days(rng.randint(1, 40)), "waiting", None)
    return holds
