"""Tests of the ecommerce environment; `arena env check` runs them."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from environments.sdk.digest import state_hash
from environments.sdk.errors import ErrorCode
from environments.sdk.state import build_seed
from environments.sdk.testing import EnvHarness, ToolCallFailed

from . import TODAY, env
from .models import money

DELIVERED_IN_WINDOW = """
    SELECT o.id, oi.product_id, oi.quantity, oi.unit_price FROM orders o
    JOIN shipments s ON s.order_id = o.id JOIN order_items oi ON oi.order_id = o.id
    JOIN products p ON p.id = oi.product_id
    WHERE o.status = 'delivered' AND s.delivered_on >= ? AND p.category NOT IN ('Beauty', 'Grocery')
      AND oi.id NOT IN (SELECT order_item_id FROM returns) AND oi.quantity {quantity}
    ORDER BY o.id LIMIT 1
"""


@pytest.fixture
def h():
    with EnvHarness(env) as harness:
        yield harness


def fails(h: EnvHarness, code: ErrorCode, tool: str, **arguments: Any) -> str:
    """Assert that the call fails with ``code`` and leaves the state untouched; return the message."""
    before = h.state.state_hash()
    with pytest.raises(ToolCallFailed) as err:
        h.call(tool, **arguments)
    assert err.value.code == code, err.value.message
    assert h.state.state_hash() == before
    return err.value.message


def one(h: EnvHarness, sql: str, *params: Any) -> Any:
    """The first row of a query (a bare value when it has one column)."""
    rows = h.query(sql, *params)
    assert rows, f"no row for {sql}"
    return rows[0][0] if len(rows[0]) == 1 else rows[0]


def stock(h: EnvHarness, product_id: int) -> int:
    return one(h, "SELECT stock FROM products WHERE id = ?", product_id)


def in_stock_product(h: EnvHarness, minimum: int = 10) -> tuple[int, float]:
    return one(h, "SELECT id, price FROM products WHERE active AND stock >= ? ORDER BY id LIMIT 1", minimum)


def delivered_item(h: EnvHarness, quantity: str = ">= 1") -> tuple[int, int, int, float]:
    """(order id, product id, ordered quantity, unit price) of a returnable, not yet returned item."""
    cutoff = (TODAY - timedelta(days=30)).isoformat()
    return one(h, DELIVERED_IN_WINDOW.format(quantity=quantity), cutoff)


def order_in_status(h: EnvHarness, status: str) -> int:
    return one(h, "SELECT id FROM orders WHERE status = ? ORDER BY id LIMIT 1", status)


def set_delivery_date(h: EnvHarness, order_id: int, days_ago: int) -> None:
    """Test setup: move an order's delivery date."""
    delivered = (TODAY - timedelta(days=days_ago)).isoformat()
    h.state.conn.execute("UPDATE shipments SET delivered_on = ? WHERE order_id = ?", (delivered, order_id))
    h.state.conn.commit()


# --- seed -----------------------------------------------------------------------------------------------


def test_seed_size_and_integrity(h: EnvHarness) -> None:
    tables = ["customers", "products", "coupons", "orders", "order_items", "shipments", "returns"]
    counts = {t: one(h, f"SELECT COUNT(*) FROM {t}") for t in tables}
    assert sum(counts.values()) >= 200
    assert sum(1 for n in counts.values() if n > 0) >= 4
    assert counts["customers"] >= 40 and counts["orders"] >= 150 and counts["order_items"] >= 300
    assert h.query("PRAGMA foreign_key_check") == []
    assert one(h, "SELECT COUNT(*) FROM products WHERE stock < 0") == 0
    statuses = {row[0] for row in h.query("SELECT DISTINCT status FROM orders")}
    assert statuses == {"placed", "shipped", "delivered", "cancelled"}
    # Every total follows the pricing rule and every delivered order has a delivery date.
    for subtotal, discount, fee, total in h.query(
        "SELECT subtotal, discount, shipping_fee, total FROM orders"
    ):
        assert total == money(subtotal - discount + fee)
        assert fee == (0.0 if subtotal - discount >= 50 else 4.99)
    undelivered = (
        "SELECT COUNT(*) FROM orders o JOIN shipments s ON s.order_id = o.id WHERE o.status = ? AND {}"
    )
    assert one(h, undelivered.format("s.delivered_on IS NULL"), "delivered") == 0
    assert one(h, undelivered.format("s.delivered_on IS NOT NULL"), "shipped") == 0
    assert one(h, "SELECT MAX(placed_on) FROM orders") <= TODAY.isoformat()


def test_seed_is_deterministic(tmp_path: Path) -> None:
    build_seed(env, tmp_path / "a.db")
    build_seed(env, tmp_path / "b.db")
    assert state_hash(sqlite3.connect(tmp_path / "a.db")) == state_hash(sqlite3.connect(tmp_path / "b.db"))


# --- reads ----------------------------------------------------------------------------------------------


def test_search_customers(h: EnvHarness) -> None:
    name, city = one(h, "SELECT name, city FROM customers WHERE id = 1")
    last = name.split()[-1]
    found = h.call("search_customers", name=last.lower())
    expected = one(h, "SELECT COUNT(*) FROM customers WHERE name LIKE ?", f"%{last}%")
    assert len(found) == min(expected, 20) and 1 in {c["id"] for c in found}
    assert all(last.lower() in c["name"].lower() for c in found)
    assert [c["name"] for c in found] == sorted(c["name"] for c in found)
    in_city = h.call("search_customers", city=city.upper(), tier="standard", limit=100)
    assert in_city and all(c["city"] == city and c["tier"] == "standard" for c in in_city)
    assert len(h.call("search_customers", limit=5)) == 5
    assert h.call("search_customers", email="nobody-at-all@") == []


def test_get_customer(h: EnvHarness) -> None:
    customer_id = one(h, "SELECT customer_id FROM orders GROUP BY customer_id ORDER BY COUNT(*) DESC LIMIT 1")
    count, spent, last = one(
        h,
        "SELECT COUNT(*), SUM(total), MAX(placed_on) FROM orders "
        "WHERE customer_id = ? AND status != 'cancelled'",
        customer_id,
    )
    customer = h.call("get_customer", customer_id=customer_id)
    assert customer["id"] == customer_id and "@" in customer["email"]
    assert customer["order_count"] == count and customer["last_order_on"] == last
    assert customer["lifetime_spent"] == money(spent)
    fails(h, ErrorCode.NOT_FOUND, "get_customer", customer_id=9999)


def test_search_products(h: EnvHarness) -> None:
    electronics = h.call("search_products", category="Electronics", sort_by="price_desc", limit=100)
    prices = [p["price"] for p in electronics]
    assert prices == sorted(prices, reverse=True) and len(prices) >= 5
    assert all(p["category"] == "Electronics" and p["active"] for p in electronics)
    in_range = h.call("search_products", min_price=20, max_price=40, in_stock_only=True, limit=100)
    assert in_range and all(20 <= p["price"] <= 40 and p["stock"] > 0 for p in in_range)
    cheapest_stock = h.call("search_products", sort_by="stock_asc", limit=1)[0]["stock"]
    assert cheapest_stock == one(h, "SELECT MIN(stock) FROM products WHERE active")
    discontinued = one(h, "SELECT id FROM products WHERE NOT active LIMIT 1")
    assert discontinued not in {p["id"] for p in h.call("search_products", limit=100)}
    assert discontinued in {p["id"] for p in h.call("search_products", include_discontinued=True, limit=100)}
    assert [p["name"] for p in h.call("search_products", query="yoga")] == ["Yoga Mat 6mm"]
    fails(h, ErrorCode.VALIDATION_ERROR, "search_products", min_price=50, max_price=10)


def test_get_order(h: EnvHarness) -> None:
    order_id, product_id, quantity, _ = delivered_item(h)
    order = h.call("get_order", order_id=order_id)
    assert order["status"] == "delivered" and order["customer_name"]
    assert len(order["items"]) == one(h, "SELECT COUNT(*) FROM order_items WHERE order_id = ?", order_id)
    item = next(i for i in order["items"] if i["product_id"] == product_id)
    assert item["quantity"] == quantity and item["returned_quantity"] == 0
    delivered = one(h, "SELECT delivered_on FROM shipments WHERE order_id = ?", order_id)
    assert order["shipment"]["delivered_on"] == delivered
    assert order["return_deadline"] > TODAY.isoformat() >= delivered
    placed = h.call("get_order", order_id=order_in_status(h, "placed"))
    assert placed["shipment"] is None and placed["return_deadline"] is None
    fails(h, ErrorCode.NOT_FOUND, "get_order", order_id=99999)


def test_search_orders(h: EnvHarness) -> None:
    customer_id = one(h, "SELECT customer_id FROM orders GROUP BY customer_id ORDER BY COUNT(*) DESC LIMIT 1")
    mine = h.call("search_orders", customer_id=customer_id, limit=100)
    assert len(mine) == one(h, "SELECT COUNT(*) FROM orders WHERE customer_id = ?", customer_id)
    assert [o["placed_on"] for o in mine] == sorted((o["placed_on"] for o in mine), reverse=True)
    units = one(h, "SELECT SUM(quantity) FROM order_items WHERE order_id = ?", mine[0]["id"])
    assert mine[0]["units"] == units
    shipped = h.call("search_orders", status="shipped", placed_from="2026-06-01", placed_to=TODAY.isoformat())
    assert shipped and all(o["status"] == "shipped" and o["placed_on"] >= "2026-06-01" for o in shipped)
    product_id = one(h, "SELECT product_id FROM order_items ORDER BY id LIMIT 1")
    with_product = h.call("search_orders", product_id=product_id, limit=100)
    assert len(with_product) == one(h, "SELECT COUNT(*) FROM order_items WHERE product_id = ?", product_id)
    assert len(h.call("search_orders", limit=3)) == 3
    fails(h, ErrorCode.VALIDATION_ERROR, "search_orders", placed_from="2026-06-10", placed_to="2026-06-01")
    fails(h, ErrorCode.NOT_FOUND, "search_orders", customer_id=9999)
    fails(h, ErrorCode.NOT_FOUND, "search_orders", product_id=9999)


def test_sales_report(h: EnvHarness) -> None:
    period = {"date_from": "2026-01-01", "date_to": "2026-03-31"}
    report = h.call("sales_report", group_by="month", **period)
    orders, net = one(
        h,
        "SELECT COUNT(*), SUM(total) FROM orders WHERE status != 'cancelled' AND placed_on BETWEEN ? AND ?",
        *period.values(),
    )
    assert report["orders"] == orders and report["net_revenue"] == money(net)
    assert sorted(g["group"] for g in report["groups"]) == ["2026-01", "2026-02", "2026-03"]
    gross = one(
        h,
        "SELECT SUM(oi.quantity * oi.unit_price) FROM order_items oi JOIN orders o ON o.id = oi.order_id "
        "WHERE o.status != 'cancelled' AND o.placed_on BETWEEN ? AND ?",
        *period.values(),
    )
    assert money(sum(g["gross_sales"] for g in report["groups"])) == money(gross)
    by_category = h.call("sales_report", limit=3)
    assert len(by_category["groups"]) == 3 and by_category["refunds"] > 0
    sales = [g["gross_sales"] for g in by_category["groups"]]
    assert sales == sorted(sales, reverse=True)
    top = h.call("sales_report", group_by="product", limit=1)["groups"][0]
    assert top["units"] > 0 and top["group"] == one(
        h, "SELECT name FROM products WHERE name = ?", top["group"]
    )
    fails(h, ErrorCode.VALIDATION_ERROR, "sales_report", date_from="2026-05-01", date_to="2026-04-01")


def test_reads_do_not_write(h: EnvHarness) -> None:
    seed_hash = h.state.state_hash("seed")
    h.call("search_customers")
    h.call("get_customer", customer_id=1)
    h.call("search_products")
    h.call("get_order", order_id=1)
    h.call("search_orders")
    h.call("sales_report")
    assert h.state.state_hash() == seed_hash


# --- orders ---------------------------------------------------------------------------------------------


def test_place_order_reserves_stock_and_applies_coupon(h: EnvHarness) -> None:
    (first, price1), (second, price2) = h.query(
        "SELECT id, price FROM products WHERE active AND stock >= 10 AND price >= 30 ORDER BY id LIMIT 2"
    )
    stock1, stock2 = stock(h, first), stock(h, second)
    used = one(h, "SELECT times_used FROM coupons WHERE code = 'SUMMER15'")
    order = h.call(
        "place_order",
        customer_id=3,
        items=[{"product_id": first, "quantity": 2}, {"product_id": second, "quantity": 1}],
        coupon_code="summer15",
    )
    subtotal = money(2 * price1 + price2)
    assert order["status"] == "placed" and order["placed_on"] == TODAY.isoformat()
    assert order["subtotal"] == subtotal and order["coupon_code"] == "SUMMER15"
    assert order["discount"] == money(subtotal * 0.15) and order["shipping_fee"] == 0.0
    assert order["total"] == money(subtotal - order["discount"])
    assert [i["quantity"] for i in order["items"]] == [2, 1]
    assert (stock(h, first), stock(h, second)) == (stock1 - 2, stock2 - 1)
    assert one(h, "SELECT times_used FROM coupons WHERE code = 'SUMMER15'") == used + 1
    assert one(h, "SELECT COUNT(*) FROM order_items WHERE order_id = ?", order["id"]) == 2


def test_place_order_small_order_pays_shipping(h: EnvHarness) -> None:
    product_id, price = one(
        h, "SELECT id, price FROM products WHERE active AND stock > 0 AND price < 20 LIMIT 1"
    )
    order = h.call("place_order", customer_id=1, items=[{"product_id": product_id, "quantity": 1}])
    assert order["shipping_fee"] == 4.99 and order["total"] == money(price + 4.99)


def test_place_order_errors(h: EnvHarness) -> None:
    product_id, _ = in_stock_product(h)
    line = [{"product_id": product_id, "quantity": 1}]
    big = [{"product_id": product_id, "quantity": 3}]
    fails(h, ErrorCode.NOT_FOUND, "place_order", customer_id=9999, items=line)
    fails(h, ErrorCode.NOT_FOUND, "place_order", customer_id=1, items=[{"product_id": 9999, "quantity": 1}])
    fails(h, ErrorCode.VALIDATION_ERROR, "place_order", customer_id=1, items=line + line)
    fails(h, ErrorCode.VALIDATION_ERROR, "place_order", customer_id=1, items=[])
    fails(
        h, ErrorCode.VALIDATION_ERROR, "place_order", customer_id=1, items=[{"product_id": 1, "quantity": 0}]
    )
    discontinued = one(h, "SELECT id FROM products WHERE NOT active LIMIT 1")
    message = fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "place_order",
        customer_id=1,
        items=[{"product_id": discontinued, "quantity": 1}],
    )
    assert f"product {discontinued}" in message
    scarce, available = one(
        h, "SELECT id, stock FROM products WHERE active AND stock BETWEEN 1 AND 9 LIMIT 1"
    )
    too_many = [{"product_id": scarce, "quantity": available + 1}]
    assert "in stock" in fails(h, ErrorCode.LIMIT_EXCEEDED, "place_order", customer_id=1, items=too_many)
    fails(h, ErrorCode.NOT_FOUND, "place_order", customer_id=1, items=line, coupon_code="NOPE")
    fails(h, ErrorCode.PRECONDITION_FAILED, "place_order", customer_id=1, items=line, coupon_code="SPRING20")
    fails(h, ErrorCode.LIMIT_EXCEEDED, "place_order", customer_id=1, items=big, coupon_code="VIP30")
    cheap = [{"product_id": in_stock_product(h)[0], "quantity": 1}]
    assert "at least 300.00" in fails(
        h, ErrorCode.PRECONDITION_FAILED, "place_order", customer_id=1, items=cheap, coupon_code="BIGSPEND25"
    )


def test_failed_write_leaves_no_partial_changes(h: EnvHarness) -> None:
    """A multi-line order whose last line cannot be served reserves nothing at all."""
    good, _ = in_stock_product(h)
    scarce, available = one(
        h, "SELECT id, stock FROM products WHERE active AND stock BETWEEN 1 AND 9 LIMIT 1"
    )
    good_stock, orders = stock(h, good), one(h, "SELECT COUNT(*) FROM orders")
    items = [{"product_id": good, "quantity": 2}, {"product_id": scarce, "quantity": available + 1}]
    fails(h, ErrorCode.LIMIT_EXCEEDED, "place_order", customer_id=1, items=items)
    assert one(h, "SELECT COUNT(*) FROM orders") == orders
    assert (stock(h, good), stock(h, scarce)) == (good_stock, available)
    assert h.state.state_hash() == h.state.state_hash("seed")
    assert all(not any(change.values()) for change in h.state.diff().values())


def test_cancel_order(h: EnvHarness) -> None:
    product_id, _ = in_stock_product(h)
    before = stock(h, product_id)
    used = one(h, "SELECT times_used FROM coupons WHERE code = 'WELCOME10'")
    order = h.call(
        "place_order",
        customer_id=2,
        items=[{"product_id": product_id, "quantity": 3}],
        coupon_code="WELCOME10",
    )
    cancelled = h.call("cancel_order", order_id=order["id"], reason="Ordered by mistake")
    assert cancelled["status"] == "cancelled" and cancelled["cancel_reason"] == "Ordered by mistake"
    assert stock(h, product_id) == before
    assert one(h, "SELECT times_used FROM coupons WHERE code = 'WELCOME10'") == used
    fails(h, ErrorCode.CONFLICT, "cancel_order", order_id=order["id"])
    for status in ("shipped", "delivered"):
        message = fails(h, ErrorCode.PRECONDITION_FAILED, "cancel_order", order_id=order_in_status(h, status))
        assert "can no longer be cancelled" in message
    fails(h, ErrorCode.NOT_FOUND, "cancel_order", order_id=99999)


# --- shipping -------------------------------------------------------------------------------------------


def test_ship_order(h: EnvHarness) -> None:
    order_id = order_in_status(h, "placed")
    shipment = h.call("ship_order", order_id=order_id, carrier="FedEx")
    assert shipment["order_status"] == "shipped" and shipment["shipped_on"] == TODAY.isoformat()
    assert shipment["tracking_number"].startswith("FX") and shipment["delivered_on"] is None
    assert one(h, "SELECT status FROM orders WHERE id = ?", order_id) == "shipped"
    fails(h, ErrorCode.CONFLICT, "ship_order", order_id=order_id, carrier="UPS")
    fails(
        h,
        ErrorCode.PRECONDITION_FAILED,
        "ship_order",
        order_id=order_in_status(h, "cancelled"),
        carrier="UPS",
    )
    fails(h, ErrorCode.NOT_FOUND, "ship_order", order_id=99999, carrier="UPS")
    fails(h, ErrorCode.VALIDATION_ERROR, "ship_order", order_id=order_id, carrier="Pigeon Post")


def test_confirm_delivery(h: EnvHarness) -> None:
    order_id, shipped_on = one(
        h,
        "SELECT o.id, s.shipped_on FROM orders o JOIN shipments s ON s.order_id = o.id "
        "WHERE o.status = 'shipped' AND s.shipped_on < ? ORDER BY o.id LIMIT 1",
        TODAY.isoformat(),
    )
    long_before_shipping = (TODAY - timedelta(days=30)).isoformat()
    tomorrow = (TODAY + timedelta(days=1)).isoformat()
    fails(
        h,
        ErrorCode.VALIDATION_ERROR,
        "confirm_delivery",
        order_id=order_id,
        delivered_on=long_before_shipping,
    )
    fails(h, ErrorCode.VALIDATION_ERROR, "confirm_delivery", order_id=order_id, delivered_on=tomorrow)
    delivered = h.call("confirm_delivery", order_id=order_id, delivered_on=shipped_on)
    assert delivered["delivered_on"] == shipped_on and delivered["order_status"] == "delivered"
    assert h.call("get_order", order_id=order_id)["return_deadline"] > shipped_on
    fails(h, ErrorCode.CONFLICT, "confirm_delivery", order_id=order_id)
    fails(h, ErrorCode.PRECONDITION_FAILED, "confirm_delivery", order_id=order_in_status(h, "placed"))
    fails(h, ErrorCode.NOT_FOUND, "confirm_delivery", order_id=99999)
    other = order_in_status(h, "shipped")
    assert h.call("confirm_delivery", order_id=other)["delivered_on"] == TODAY.isoformat()


# --- returns --------------------------------------------------------------------------------------------


def test_request_return(h: EnvHarness) -> None:
    order_id, product_id, quantity, _ = delivered_item(h, quantity=">= 2")
    args = {"order_id": order_id, "product_id": product_id, "reason": "size_fit"}
    ret = h.call("request_return", quantity=1, **args)
    assert ret["status"] == "requested" and ret["requested_on"] == TODAY.isoformat() and ret["quantity"] == 1
    assert ret["order_id"] == order_id and ret["product_id"] == product_id
    item = next(i for i in h.call("get_order", order_id=order_id)["items"] if i["product_id"] == product_id)
    assert item["returned_quantity"] == 1
    message = fails(h, ErrorCode.VALIDATION_ERROR, "request_return", quantity=quantity, **args)
    assert f"only {quantity - 1} of {quantity}" in message
    assert h.call("request_return", quantity=quantity - 1, **args)["quantity"] == quantity - 1


def test_request_return_errors(h: EnvHarness) -> None:
    order_id, product_id, quantity, _ = delivered_item(h)
    base = {"order_id": order_id, "product_id": product_id, "quantity": 1, "reason": "wrong_item"}

    def refused(code: ErrorCode, **changes: Any) -> str:
        return fails(h, code, "request_return", **{**base, **changes})

    refused(ErrorCode.NOT_FOUND, order_id=99999)
    refused(ErrorCode.NOT_FOUND, product_id=9999)
    refused(ErrorCode.VALIDATION_ERROR, quantity=quantity + 1)
    refused(ErrorCode.VALIDATION_ERROR, quantity=0)
    refused(ErrorCode.VALIDATION_ERROR, reason="bored")
    shipped_id, shipped_product = one(
        h,
        "SELECT o.id, oi.product_id FROM orders o JOIN order_items oi ON oi.order_id = o.id "
        "WHERE o.status = 'shipped' LIMIT 1",
    )
    assert "only delivered" in refused(
        ErrorCode.PRECONDITION_FAILED, order_id=shipped_id, product_id=shipped_product
    )
    final_order, final_product = one(
        h,
        "SELECT o.id, oi.product_id FROM orders o JOIN order_items oi ON oi.order_id = o.id "
        "JOIN shipments s ON s.order_id = o.id JOIN products p ON p.id = oi.product_id "
        "WHERE o.status = 'delivered' AND s.delivered_on >= ? AND p.category IN ('Beauty', 'Grocery') "
        "LIMIT 1",
        (TODAY - timedelta(days=30)).isoformat(),
    )
    assert "final-sale" in refused(ErrorCode.FORBIDDEN, order_id=final_order, product_id=final_product)


def test_return_window_is_thirty_days(h: EnvHarness) -> None:
    order_id, product_id, _, _ = delivered_item(h)
    args = {"order_id": order_id, "product_id": product_id, "quantity": 1, "reason": "no_longer_needed"}
    set_delivery_date(h, order_id, days_ago=31)
    assert "closed on" in fails(h, ErrorCode.PRECONDITION_FAILED, "request_return", **args)
    set_delivery_date(h, order_id, days_ago=30)
    assert h.call("request_return", **args)["status"] == "requested"


def test_process_return_approve_refunds_and_restocks(h: EnvHarness) -> None:
    order_id, product_id, _, unit_price = delivered_item(h)
    subtotal, discount = one(h, "SELECT subtotal, discount FROM orders WHERE id = ?", order_id)
    ret = h.call("request_return", order_id=order_id, product_id=product_id, quantity=1, reason="size_fit")
    before = stock(h, product_id)
    done = h.call("process_return", return_id=ret["id"], decision="approve")
    assert done["status"] == "refunded" and done["restocked"] is True
    assert done["refund_amount"] == money(unit_price * (1 - discount / subtotal))
    assert stock(h, product_id) == before + 1
    assert "refunded" in fails(
        h, ErrorCode.CONFLICT, "process_return", return_id=ret["id"], decision="reject"
    )
    fails(h, ErrorCode.NOT_FOUND, "process_return", return_id=99999, decision="approve")


def test_process_return_damaged_and_rejected(h: EnvHarness) -> None:
    order_id, product_id, _, _ = delivered_item(h)
    damaged = h.call("request_return", order_id=order_id, product_id=product_id, quantity=1, reason="damaged")
    before = stock(h, product_id)
    done = h.call("process_return", return_id=damaged["id"], decision="approve")
    assert done["restocked"] is False and done["refund_amount"] > 0 and stock(h, product_id) == before
    pending = one(h, "SELECT id FROM returns WHERE status = 'requested' AND id != ? LIMIT 1", damaged["id"])
    rejected = h.call("process_return", return_id=pending, decision="reject")
    assert (
        rejected["status"] == "rejected"
        and rejected["refund_amount"] is None
        and rejected["restocked"] is False
    )
    fails(h, ErrorCode.VALIDATION_ERROR, "process_return", return_id=pending, decision="maybe")


# --- stock ----------------------------------------------------------------------------------------------


def test_adjust_stock(h: EnvHarness) -> None:
    product_id, _ = in_stock_product(h)
    before = stock(h, product_id)
    assert h.call("adjust_stock", product_id=product_id, change=25)["stock"] == before + 25
    assert h.call("adjust_stock", product_id=product_id, change=-(before + 25))["stock"] == 0
    assert "cannot remove 1" in fails(h, ErrorCode.CONFLICT, "adjust_stock", product_id=product_id, change=-1)
    fails(h, ErrorCode.VALIDATION_ERROR, "adjust_stock", product_id=product_id, change=0)
    fails(h, ErrorCode.NOT_FOUND, "adjust_stock", product_id=9999, change=5)
    discontinued, left = one(h, "SELECT id, stock FROM products WHERE NOT active AND stock > 0 LIMIT 1")
    fails(h, ErrorCode.PRECONDITION_FAILED, "adjust_stock", product_id=discontinued, change=5)
    assert h.call("adjust_stock", product_id=discontinued, change=-left)["stock"] == 0


# --- argument validation and a full lifecycle -----------------------------------------------------------


def test_argument_validation(h: EnvHarness) -> None:
    fails(h, ErrorCode.VALIDATION_ERROR, "get_customer", customer_id="not-a-number")
    fails(h, ErrorCode.VALIDATION_ERROR, "get_customer")
    fails(h, ErrorCode.VALIDATION_ERROR, "get_order", order_id=1, verbose=True)
    fails(h, ErrorCode.VALIDATION_ERROR, "search_orders", placed_from="last tuesday")
    fails(h, ErrorCode.VALIDATION_ERROR, "search_products", category="Furniture")
    fails(h, ErrorCode.VALIDATION_ERROR, "search_customers", limit=0)
    fails(h, ErrorCode.VALIDATION_ERROR, "place_order", customer_id=1)
    assert h.outcome("no_such_tool").error_code == "UNKNOWN_TOOL"


def test_order_lifecycle(h: EnvHarness) -> None:
    product_id, price = in_stock_product(h)
    before = stock(h, product_id)
    order = h.call("place_order", customer_id=7, items=[{"product_id": product_id, "quantity": 2}])
    h.call("ship_order", order_id=order["id"], carrier="USPS")
    h.call("confirm_delivery", order_id=order["id"])
    ret = h.call(
        "request_return", order_id=order["id"], product_id=product_id, quantity=2, reason="wrong_item"
    )
    refund = h.call("process_return", return_id=ret["id"], decision="approve")
    assert refund["refund_amount"] == money(2 * price)
    assert stock(h, product_id) == before
    final = h.call("get_order", order_id=order["id"])
    assert final["status"] == "delivered" and final["items"][0]["returned_quantity"] == 2
    assert final["returns"][0]["status"] == "refunded"
    assert h.call("search_orders", customer_id=7, limit=1)[0]["id"] == order["id"]
