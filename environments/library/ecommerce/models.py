"""Schema and shared business constants of the ecommerce environment."""

from __future__ import annotations

from datetime import date
from typing import Literal, get_args

from sqlalchemy import CheckConstraint, ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

TODAY = date(2026, 6, 15)
"""The simulated current date that every date rule uses."""

RETURN_WINDOW_DAYS = 30
FREE_SHIPPING_THRESHOLD = 50.0
SHIPPING_FEE = 4.99

Category = Literal[
    "Electronics", "Home & Kitchen", "Books", "Clothing", "Sports & Outdoors", "Toys", "Beauty", "Grocery"
]
CATEGORIES: tuple[str, ...] = get_args(Category)
FINAL_SALE_CATEGORIES = frozenset({"Beauty", "Grocery"})
"""Hygiene and perishable goods: never returnable."""

Tier = Literal["standard", "silver", "gold"]
OrderStatus = Literal["placed", "shipped", "delivered", "cancelled"]
Carrier = Literal["UPS", "FedEx", "DHL", "USPS"]
ReturnReason = Literal["damaged", "wrong_item", "not_as_described", "size_fit", "no_longer_needed"]
CARRIERS: tuple[str, ...] = get_args(Carrier)
RETURN_REASONS: tuple[str, ...] = get_args(ReturnReason)

_TRACKING_PREFIX = {"UPS": "1Z", "FedEx": "FX", "DHL": "JD", "USPS": "94"}


def money(amount: float) -> float:
    """Round an amount to cents."""
    return round(amount + 1e-9, 2)


def tracking_number(carrier: str, order_id: int) -> str:
    """The carrier's tracking number of an order's shipment (one shipment per order)."""
    return f"{_TRACKING_PREFIX[carrier]}{order_id * 7919 + 1000003:012d}"


def order_charges(subtotal: float, percent_off: int) -> tuple[float, float, float]:
    """(discount, shipping fee, total) of an order; shipping is free from the threshold after discount."""
    discount = money(subtotal * percent_off / 100)
    shipping = 0.0 if subtotal - discount >= FREE_SHIPPING_THRESHOLD else SHIPPING_FEE
    return discount, shipping, money(subtotal - discount + shipping)


def refund_for(unit_price: float, quantity: int, subtotal: float, discount: float) -> float:
    """Refund of returned units: their price minus their share of the order's discount (not shipping)."""
    return money(unit_price * quantity * (1 - discount / subtotal))


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(80))
    email: Mapped[str] = mapped_column(String(120), unique=True)
    city: Mapped[str] = mapped_column(String(60))
    state: Mapped[str] = mapped_column(String(2))
    tier: Mapped[str] = mapped_column(String(10))
    joined_on: Mapped[date]


class Product(Base):
    __tablename__ = "products"
    __table_args__ = (CheckConstraint("stock >= 0", name="stock_not_negative"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(120))
    category: Mapped[str] = mapped_column(String(30))
    price: Mapped[float]
    stock: Mapped[int]
    active: Mapped[bool] = mapped_column(default=True)


class Coupon(Base):
    __tablename__ = "coupons"
    code: Mapped[str] = mapped_column(String(20), primary_key=True)
    percent_off: Mapped[int]
    min_subtotal: Mapped[float]
    valid_until: Mapped[date]
    max_uses: Mapped[int]
    times_used: Mapped[int]


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"), index=True)
    status: Mapped[str] = mapped_column(String(12))
    placed_on: Mapped[date]
    coupon_code: Mapped[str | None] = mapped_column(ForeignKey("coupons.code"))
    subtotal: Mapped[float]
    discount: Mapped[float]
    shipping_fee: Mapped[float]
    total: Mapped[float]
    cancel_reason: Mapped[str | None] = mapped_column(String(200))


class OrderItem(Base):
    __tablename__ = "order_items"
    __table_args__ = (UniqueConstraint("order_id", "product_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"), index=True)
    product_id: Mapped[int] = mapped_column(ForeignKey("products.id"))
    quantity: Mapped[int]
    unit_price: Mapped[float]


class Shipment(Base):
    __tablename__ = "shipments"
    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"), unique=True)
    carrier: Mapped[str] = mapped_column(String(10))
    tracking_number: Mapped[str] = mapped_column(String(20), unique=True)
    shipped_on: Mapped[date]
    delivered_on: Mapped[date | None]


class Return(Base):
    __tablename__ = "returns"
    id: Mapped[int] = mapped_column(primary_key=True)
    order_item_id: Mapped[int] = mapped_column(ForeignKey("order_items.id"), index=True)
    quantity: Mapped[int]
    reason: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(10))
    requested_on: Mapped[date]
    refund_amount: Mapped[float | None]
