"""Deterministic seed data: a few months of a small online shop's history up to ``TODAY``."""

from __future__ import annotations

import random
from datetime import date, timedelta

from sqlalchemy.orm import Session

from environments.library.ecommerce.app import env
from environments.library.ecommerce.models import (
    CARRIERS,
    FINAL_SALE_CATEGORIES,
    RETURN_REASONS,
    TODAY,
    Coupon,
    Customer,
    Order,
    OrderItem,
    Product,
    Return,
    Shipment,
    money,
    order_charges,
    refund_for,
    tracking_number,
)

FIRST_NAMES = [
    "Olivia", "Liam", "Emma", "Noah", "Ava", "Ethan", "Sophia", "Mason", "Isabella", "Lucas",
    "Mia", "Logan", "Amelia", "Elijah", "Harper", "James", "Evelyn", "Benjamin", "Abigail", "Daniel",
    "Priya", "Mateo", "Chloe", "Hiroshi", "Zoe", "Omar", "Grace", "Diego", "Nora", "Samuel",
]  # fmt: skip
LAST_NAMES = [
    "Smith", "Johnson", "Williams", "Brown", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Wilson", "Anderson", "Thomas", "Moore", "Jackson", "Lee", "Walker", "Patel", "Nguyen", "Kim",
    "Clark", "Lewis", "Young", "Hernandez", "Lopez", "Scott", "Green", "Baker", "Nelson", "Carter",
]  # fmt: skip
CITIES = [
    ("Seattle", "WA"), ("Portland", "OR"), ("San Francisco", "CA"), ("Los Angeles", "CA"), ("Denver", "CO"),
    ("Austin", "TX"), ("Dallas", "TX"), ("Chicago", "IL"), ("Minneapolis", "MN"), ("Atlanta", "GA"),
    ("Miami", "FL"), ("Boston", "MA"), ("New York", "NY"), ("Philadelphia", "PA"), ("Phoenix", "AZ"),
]  # fmt: skip
EMAIL_DOMAINS = ["gmail.com", "outlook.com", "yahoo.com", "icloud.com", "proton.me"]
CATALOGUE: dict[str, list[tuple[str, float]]] = {
    "Electronics": [
        ("Wireless Noise-Cancelling Headphones", 199.99),
        ("Bluetooth Portable Speaker", 59.99),
        ("USB-C Fast Charger 65W", 34.99),
        ("4K Streaming Stick", 49.99),
        ("Mechanical Keyboard", 89.99),
        ("Wireless Ergonomic Mouse", 39.99),
        ("27-inch IPS Monitor", 249.99),
        ("Smart Fitness Watch", 149.99),
    ],
    "Home & Kitchen": [
        ("Stainless Steel French Press", 29.99),
        ("Cast Iron Skillet 12-inch", 39.99),
        ("Ceramic Dinnerware Set (16 pc)", 74.99),
        ("Electric Kettle 1.7L", 44.99),
        ("Chef's Knife 8-inch", 59.99),
        ("Memory Foam Pillow", 32.99),
        ("Robot Vacuum Cleaner", 279.99),
        ("Bamboo Cutting Board Set", 24.99),
    ],
    "Books": [
        ("The Midnight Library (Paperback)", 14.99),
        ("Atomic Habits (Hardcover)", 24.99),
        ("Dune (Paperback)", 12.99),
        ("Sapiens (Paperback)", 19.99),
        ("The Pragmatic Programmer", 44.99),
        ("Project Hail Mary (Hardcover)", 27.99),
        ("Salt Fat Acid Heat", 32.99),
    ],
    "Clothing": [
        ("Men's Merino Wool Sweater", 79.99),
        ("Women's Rain Jacket", 119.99),
        ("Organic Cotton T-Shirt", 19.99),
        ("Slim Fit Chinos", 49.99),
        ("Running Socks (6-pack)", 17.99),
        ("Down Puffer Vest", 89.99),
        ("Leather Belt", 34.99),
    ],
    "Sports & Outdoors": [
        ("Yoga Mat 6mm", 29.99),
        ("Adjustable Dumbbells (pair)", 189.99),
        ("Insulated Water Bottle 32oz", 27.99),
        ("Two-Person Camping Tent", 139.99),
        ("Trail Running Shoes", 124.99),
        ("Resistance Bands Set", 22.99),
        ("Hiking Daypack 24L", 64.99),
    ],
    "Toys": [
        ("Building Bricks Starter Set", 39.99),
        ("Wooden Train Set", 54.99),
        ("1000-Piece Jigsaw Puzzle", 18.99),
        ("Remote Control Car", 44.99),
        ("Plush Teddy Bear", 16.99),
        ("Strategy Board Game", 34.99),
    ],
    "Beauty": [
        ("Vitamin C Face Serum", 24.99),
        ("Hydrating Night Cream", 31.99),
        ("Argan Oil Shampoo", 14.99),
        ("Mineral Sunscreen SPF 50", 18.99),
        ("Electric Toothbrush", 69.99),
        ("Lavender Body Lotion", 11.99),
    ],
    "Grocery": [
        ("Organic Ground Coffee 1kg", 21.99),
        ("Matcha Green Tea Powder", 17.99),
        ("Extra Virgin Olive Oil 1L", 15.99),
        ("Manuka Honey 500g", 39.99),
        ("Dark Chocolate Variety Box", 12.99),
        ("Mixed Nuts 1kg", 19.99),
    ],
}
COUPONS = [
    # code, percent off, minimum subtotal, valid until, max uses, uses before the seeded orders
    ("WELCOME10", 10, 0.0, date(2026, 12, 31), 1000, 212),
    ("SUMMER15", 15, 50.0, date(2026, 8, 31), 300, 41),
    ("SPRING20", 20, 40.0, date(2026, 5, 31), 200, 133),
    ("BIGSPEND25", 25, 300.0, date(2026, 9, 30), 100, 12),
    ("VIP30", 30, 100.0, date(2026, 12, 31), 25, 25),
    ("FLASH5", 5, 0.0, date(2026, 6, 30), 60, 59),
    ("HOLIDAY20", 20, 75.0, date(2025, 12, 31), 500, 388),
]
CANCEL_REASONS = ["Ordered by mistake", "Found a better price", "Delivery too slow"]
ORDER_COUNT = 160
RECENT_ORDERS = 28
"""How many orders fall in the last ten days, so that every order status is represented."""


@env.seeder
def seed(db: Session, rng: random.Random) -> None:
    """Customers, catalogue and coupons, then orders with their items, shipments and returns in date order."""
    customers = _customers(rng)
    products = _products(rng)
    categories = {p.id: p.category for p in products}
    coupons = [
        Coupon(code=code, percent_off=pct, min_subtotal=low, valid_until=until, max_uses=cap, times_used=used)
        for code, pct, low, until, cap, used in COUPONS
    ]
    ages = sorted(
        (rng.randint(0, 9) if i < RECENT_ORDERS else rng.randint(10, 240) for i in range(ORDER_COUNT)),
        reverse=True,
    )
    weights = [rng.choice((1, 1, 2, 3, 5)) for _ in customers]
    orders: list[Order] = []
    lines: list[OrderItem] = []
    shipments: list[Shipment] = []
    returns: list[Return] = []
    for order_id, age in enumerate(ages, start=1):
        placed = TODAY - timedelta(days=age)
        items = [
            OrderItem(
                id=len(lines) + n,
                order_id=order_id,
                product_id=product.id,
                quantity=rng.choice((1, 1, 1, 1, 2, 2, 3)),
                unit_price=product.price,
            )
            for n, product in enumerate(rng.sample(products, rng.choice((1, 1, 2, 2, 3, 4))), start=1)
        ]
        lines.extend(items)
        subtotal = money(sum(i.unit_price * i.quantity for i in items))
        cancelled = rng.random() < 0.07
        coupon = _pick_coupon(rng, coupons, placed, subtotal, used=not cancelled)
        discount, shipping, total = order_charges(subtotal, coupon.percent_off if coupon else 0)
        order = Order(
            id=order_id,
            customer_id=rng.choices(customers, weights)[0].id,
            status="placed",
            placed_on=placed,
            coupon_code=coupon.code if coupon else None,
            subtotal=subtotal,
            discount=discount,
            shipping_fee=shipping,
            total=total,
        )
        orders.append(order)
        if cancelled:
            order.status, order.cancel_reason = "cancelled", rng.choice(CANCEL_REASONS)
        elif age >= 2:
            shipment = _ship(rng, order)
            shipments.append(shipment)
            delivered = shipment.delivered_on
            order.status = "shipped" if delivered is None else "delivered"
            for item in items if delivered else ():
                if rng.random() < 0.09 and categories[item.product_id] not in FINAL_SALE_CATEGORIES:
                    returns.append(_return(rng, len(returns) + 1, item, order, delivered))
    for batch in ([*customers, *products, *coupons], orders, lines, shipments, returns):
        db.add_all(batch)
        db.flush()


def _customers(rng: random.Random) -> list[Customer]:
    customers = []
    for cid in range(1, 46):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        city, state = rng.choice(CITIES)
        email = f"{first.lower()}.{last.lower()}{cid}@{rng.choice(EMAIL_DOMAINS)}"
        joined = date(2023, 1, 1) + timedelta(days=rng.randint(0, 1000))
        tier = rng.choices(["standard", "silver", "gold"], [6, 3, 1])[0]
        customers.append(
            Customer(
                id=cid,
                name=f"{first} {last}",
                email=email,
                city=city,
                state=state,
                tier=tier,
                joined_on=joined,
            )
        )
    return customers


def _products(rng: random.Random) -> list[Product]:
    """The catalogue, ids from 1 in catalogue order; a few items are sold out or discontinued."""
    entries = [(category, name, price) for category, items in CATALOGUE.items() for name, price in items]
    products = []
    for pid, (category, name, price) in enumerate(entries, start=1):
        stock = rng.choice((0, 3, 8)) if rng.random() < 0.12 else rng.randint(12, 180)
        active = rng.random() >= 0.06
        products.append(
            Product(id=pid, name=name, category=category, price=price, stock=stock, active=active)
        )
    return products


def _pick_coupon(
    rng: random.Random, coupons: list[Coupon], placed: date, subtotal: float, used: bool
) -> Coupon | None:
    """A coupon the customer could use on that day, for about one order in four; ``used`` counts the use."""
    usable = [
        c
        for c in coupons
        if c.valid_until >= placed and c.min_subtotal <= subtotal and c.times_used < c.max_uses
    ]
    if not usable or rng.random() >= 0.25:
        return None
    coupon = rng.choice(usable)
    coupon.times_used += used
    return coupon


def _ship(rng: random.Random, order: Order) -> Shipment:
    carrier = rng.choice(CARRIERS)
    shipped = order.placed_on + timedelta(days=rng.randint(1, 2))
    arrival = shipped + timedelta(days=rng.randint(2, 7))
    return Shipment(
        id=order.id,
        order_id=order.id,
        carrier=carrier,
        tracking_number=tracking_number(carrier, order.id),
        shipped_on=min(shipped, TODAY),
        delivered_on=arrival if arrival <= TODAY else None,
    )


def _return(rng: random.Random, return_id: int, item: OrderItem, order: Order, delivered: date) -> Return:
    """A return requested within the window; recent ones still await a decision."""
    span = min(28, (TODAY - delivered).days)
    requested = delivered + timedelta(days=rng.randint(min(1, span), span))
    quantity = rng.randint(1, item.quantity)
    status = (
        "requested" if (TODAY - requested).days <= 6 else rng.choices(["refunded", "rejected"], [4, 1])[0]
    )
    refund = (
        refund_for(item.unit_price, quantity, order.subtotal, order.discount)
        if status == "refunded"
        else None
    )
    reason = rng.choice(RETURN_REASONS)
    return Return(
        id=return_id,
        order_item_id=item.id,
        quantity=quantity,
        reason=reason,
        status=status,
        requested_on=requested,
        refund_amount=refund,
    )
