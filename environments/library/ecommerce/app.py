"""The ``env`` object that the seed and tool modules register themselves on."""

from __future__ import annotations

from environments.library.ecommerce.models import TODAY, Base
from environments.sdk import Environment

env = Environment(
    "ecommerce",
    theme="online shop orders, shipping and returns",
    category="commerce",
    description=(
        "An online shop's back office: customers, a product catalogue with stock, discount coupons, "
        "orders with their items, shipments and returns. Place, cancel, ship and deliver orders, "
        f"handle return requests and stock, and report sales. Today is {TODAY.isoformat()}."
    ),
    base=Base,
    version="1",
)
