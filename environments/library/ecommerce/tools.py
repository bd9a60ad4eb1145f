"""The ecommerce tools: look-ups, searches, a sales report; order, shipping, return and stock operations."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from environments.library.ecommerce.app import env
from environments.library.ecommerce.models import (
    FINAL_SALE_CATEGORIES,
    RETURN_WINDOW_DAYS,
    TODAY,
    Carrier,
    Category,
    Coupon,
    Customer,
    Order,
    OrderItem,
    OrderStatus,
    Product,
    Return,
    ReturnReason,
    Shipment,
    Tier,
    money,
    order_charges,
    refund_for,
    tracking_number,
)
from environments.sdk import (
    Conflict,
    Forbidden,
    LimitExceeded,
    NotFound,
    PreconditionFailed,
    ValidationFailed,
    orm_to_dict,
)
from environments.sdk.helpers import check_range, get_or_raise

Limit = Annotated[int, Field(ge=1, le=100)]
Amount = Annotated[float, Field(ge=0)]


class OrderLine(BaseModel):
    """One line of a new order."""

    model_config = ConfigDict(extra="forbid")
    product_id: int
    quantity: Annotated[int, Field(ge=1, le=20)]


def _label(product: Product) -> str:
    return f"product {product.id} ({product.name})"


def _returned_quantities(returns: Iterable[Return]) -> dict[int, int]:
    """Units of each order item already returned or awaiting a return decision (rejected ones don't count)."""
    returned: dict[int, int] = {}
    for ret in returns:
        if ret.status != "rejected":
            returned[ret.order_item_id] = returned.get(ret.order_item_id, 0) + ret.quantity
    return returned


def _order_detail(db: Session, order_id: int) -> dict[str, Any]:
    """An order with its customer's name, items, shipment, return deadline and returns (NOT_FOUND if none)."""
    rows = db.execute(
        select(Order, Customer.name, Shipment, OrderItem, Product.name, Product.category, Return)
        .join(Customer, Order.customer_id == Customer.id)
        .outerjoin(Shipment, Shipment.order_id == Order.id)
        .outerjoin(OrderItem, OrderItem.order_id == Order.id)
        .outerjoin(Product, OrderItem.product_id == Product.id)
        .outerjoin(Return, Return.order_item_id == OrderItem.id)
        .where(Order.id == order_id)
        .order_by(OrderItem.id, Return.id)
    ).all()
    if not rows:
        raise NotFound(f"no order with id {order_id!r}")
    order, customer_name, shipment = rows[0][:3]
    items: dict[int, tuple[OrderItem, str, str]] = {}
    returns: list[Return] = []
    for *_, item, name, category, ret in rows:
        if item is not None:
            items[item.id] = (item, name, category)
        if ret is not None:
            returns.append(ret)
    returns.sort(key=lambda ret: ret.id)
    returned = _returned_quantities(returns)
    delivered = shipment.delivered_on if shipment else None
    return {
        **orm_to_dict(order),
        "customer_name": customer_name,
        "items": [
            {
                **orm_to_dict(item),
                "product_name": name,
                "category": category,
                "line_total": money(item.unit_price * item.quantity),
                "returned_quantity": returned.get(item.id, 0),
            }
            for item, name, category in items.values()
        ],
        "shipment": orm_to_dict(shipment) if shipment else None,
        "return_deadline": delivered + timedelta(days=RETURN_WINDOW_DAYS) if delivered else None,
        "returns": [orm_to_dict(r) for r in returns],
    }


@env.tool
def search_customers(
    db: Session,
    name: str | None = None,
    email: str | None = None,
    city: str | None = None,
    tier: Tier | None = None,
    limit: Limit = 20,
) -> list[dict]:
    """Search customers, ordered by name. Text filters match case-insensitively anywhere in the field.

    Args:
        name: Part of the customer's full name.
        email: Part of the e-mail address.
        city: Part of the city name.
        tier: Only customers of this loyalty tier.
        limit: Maximum number of customers returned.
    """
    query = select(Customer).order_by(Customer.name, Customer.id).limit(limit)
    for column, text in ((Customer.name, name), (Customer.email, email), (Customer.city, city)):
        if text:
            query = query.where(column.icontains(text, autoescape=True))
    if tier is not None:
        query = query.where(Customer.tier == tier)
    return [orm_to_dict(c) for c in db.scalars(query)]


@env.tool
def get_customer(db: Session, customer_id: int) -> dict:
    """Get a customer's profile with order statistics (cancelled orders are not counted).

    Args:
        customer_id: The customer's id.
    """
    customer = get_or_raise(db, Customer, customer_id)
    count, spent, last = db.execute(
        select(
            func.count(Order.id), func.coalesce(func.sum(Order.total), 0.0), func.max(Order.placed_on)
        ).where(Order.customer_id == customer_id, Order.status != "cancelled")
    ).one()
    open_orders = db.scalar(
        select(func.count(Order.id)).where(
            Order.customer_id == customer_id, Order.status.in_(("placed", "shipped"))
        )
    )
    return {
        **orm_to_dict(customer),
        "order_count": count,
        "lifetime_spent": money(spent),
        "last_order_on": last,
        "open_orders": open_orders,
    }


@env.tool
def search_products(
    db: Session,
    query: str | None = None,
    category: Category | None = None,
    min_price: Amount | None = None,
    max_price: Amount | None = None,
    in_stock_only: bool = False,
    include_discontinued: bool = False,
    sort_by: Literal["name", "price_asc", "price_desc", "stock_asc"] = "name",
    limit: Limit = 20,
) -> list[dict]:
    """Search the product catalogue (price, stock and whether each product is still sold).

    Args:
        query: Part of the product name, matched case-insensitively.
        category: Only products of this category.
        min_price: Lowest unit price, inclusive.
        max_price: Highest unit price, inclusive.
        in_stock_only: Only products with at least one unit in stock.
        include_discontinued: Also list discontinued products, which can no longer be ordered.
        sort_by: Order of the results: by name, by price up or down, or lowest stock first.
        limit: Maximum number of products returned.
    """
    check_range(min_price, max_price, "min_price", "max_price")
    order = {
        "name": (Product.name,),
        "price_asc": (Product.price, Product.id),
        "price_desc": (Product.price.desc(), Product.id),
        "stock_asc": (Product.stock, Product.id),
    }[sort_by]
    stmt = select(Product).order_by(*order).limit(limit)
    if query:
        stmt = stmt.where(Product.name.icontains(query, autoescape=True))
    if category is not None:
        stmt = stmt.where(Product.category == category)
    if min_price is not None:
        stmt = stmt.where(Product.price >= min_price)
    if max_price is not None:
        stmt = stmt.where(Product.price <= max_price)
    if in_stock_only:
        stmt = stmt.where(Product.stock > 0)
    if not include_discontinued:
        stmt = stmt.where(Product.active)
    return [orm_to_dict(p) for p in db.scalars(stmt)]


@env.tool
def get_order(db: Session, order_id: int) -> dict:
    """Get an order with its items, shipment, return deadline and returns.

    Args:
        order_id: The order's id.
    """
    return _order_detail(db, order_id)


@env.tool
def search_orders(
    db: Session,
    customer_id: int | None = None,
    status: OrderStatus | None = None,
    placed_from: date | None = None,
    placed_to: date | None = None,
    product_id: int | None = None,
    limit: Limit = 20,
) -> list[dict]:
    """Search orders, newest first, returning a summary of each (use get_order for the details).

    Args:
        customer_id: Only orders of this customer.
        status: Only orders in this status.
        placed_from: Earliest order date (YYYY-MM-DD), inclusive.
        placed_to: Latest order date (YYYY-MM-DD), inclusive.
        product_id: Only orders containing this product.
        limit: Maximum number of orders returned.
    """
    check_range(placed_from, placed_to, "placed_from", "placed_to")
    units = select(func.sum(OrderItem.quantity)).where(OrderItem.order_id == Order.id).scalar_subquery()
    stmt = select(Order, units).order_by(Order.placed_on.desc(), Order.id.desc()).limit(limit)
    if customer_id is not None:
        get_or_raise(db, Customer, customer_id)
        stmt = stmt.where(Order.customer_id == customer_id)
    if product_id is not None:
        get_or_raise(db, Product, product_id)
        stmt = stmt.where(Order.id.in_(select(OrderItem.order_id).where(OrderItem.product_id == product_id)))
    if status is not None:
        stmt = stmt.where(Order.status == status)
    if placed_from is not None:
        stmt = stmt.where(Order.placed_on >= placed_from)
    if placed_to is not None:
        stmt = stmt.where(Order.placed_on <= placed_to)
    return [{**orm_to_dict(order), "units": count} for order, count in db.execute(stmt)]


@env.tool
def sales_report(
    db: Session,
    date_from: date | None = None,
    date_to: date | None = None,
    group_by: Literal["category", "product", "month"] = "category",
    limit: Limit = 10,
) -> dict:
    """Sales of non-cancelled orders placed in a period: totals, and gross sales per group, best first.

    Args:
        date_from: First order date of the period (YYYY-MM-DD), inclusive; default: no lower bound.
        date_to: Last order date of the period (YYYY-MM-DD), inclusive; default: no upper bound.
        group_by: Break gross sales down by product category, product, or month (YYYY-MM).
        limit: Maximum number of groups returned.
    """
    check_range(date_from, date_to, "date_from", "date_to")
    in_period = [Order.status != "cancelled"]
    if date_from is not None:
        in_period.append(Order.placed_on >= date_from)
    if date_to is not None:
        in_period.append(Order.placed_on <= date_to)
    key = {
        "category": Product.category,
        "product": Product.name,
        "month": func.strftime("%Y-%m", Order.placed_on),
    }[group_by]
    gross = func.sum(OrderItem.quantity * OrderItem.unit_price)
    groups = db.execute(
        select(key, func.count(func.distinct(Order.id)), func.sum(OrderItem.quantity), gross)
        .select_from(OrderItem)
        .join(Order, OrderItem.order_id == Order.id)
        .join(Product, OrderItem.product_id == Product.id)
        .where(*in_period)
        .group_by(key)
        .order_by(gross.desc(), key)
        .limit(limit)
    ).all()
    orders, discounts, net = db.execute(
        select(func.count(Order.id), func.sum(Order.discount), func.sum(Order.total)).where(*in_period)
    ).one()
    refunds = db.scalar(
        select(func.sum(Return.refund_amount))
        .join(OrderItem, Return.order_item_id == OrderItem.id)
        .join(Order, OrderItem.order_id == Order.id)
        .where(*in_period, Return.status == "refunded")
    )
    return {
        "date_from": date_from,
        "date_to": date_to,
        "orders": orders,
        "discounts": money(discounts or 0),
        "net_revenue": money(net or 0),
        "refunds": money(refunds or 0),
        "group_by": group_by,
        "groups": [
            {"group": name, "orders": n, "units": units, "gross_sales": money(total)}
            for name, n, units, total in groups
        ],
    }


@env.tool(mutates=True)
def place_order(
    db: Session,
    customer_id: int,
    items: Annotated[list[OrderLine], Field(min_length=1, max_length=10)],
    coupon_code: str | None = None,
) -> dict:
    """Place an order dated today; reserves the stock. Shipping is free from $50 after discount, else $4.99.

    Args:
        customer_id: The ordering customer's id.
        items: The lines of the order, each a product id and a quantity (one line per product).
        coupon_code: An optional discount coupon code; it must be unexpired, not used up, and the
            order subtotal must reach its minimum.
    """
    get_or_raise(db, Customer, customer_id)
    product_ids = [line.product_id for line in items]
    if len(set(product_ids)) != len(product_ids):
        raise ValidationFailed("each product may appear on only one line of an order; merge the quantities")
    found = {p.id: p for p in db.scalars(select(Product).where(Product.id.in_(product_ids)))}
    missing = next((product_id for product_id in product_ids if product_id not in found), None)
    if missing is not None:
        raise NotFound(f"no product with id {missing!r}")
    products = [found[product_id] for product_id in product_ids]
    for line, product in zip(items, products, strict=True):
        if not product.active:
            raise PreconditionFailed(f"{_label(product)} is discontinued and cannot be ordered")
        if line.quantity > product.stock:
            raise LimitExceeded(
                f"{_label(product)} has only {product.stock} in stock, {line.quantity} requested",
                product_id=product.id,
                in_stock=product.stock,
            )
    subtotal = money(sum(p.price * line.quantity for p, line in zip(products, items, strict=True)))
    coupon = _usable_coupon(db, coupon_code, subtotal) if coupon_code else None
    discount, shipping, total = order_charges(subtotal, coupon.percent_off if coupon else 0)
    order = Order(
        customer_id=customer_id,
        status="placed",
        placed_on=TODAY,
        coupon_code=coupon.code if coupon else None,
        subtotal=subtotal,
        discount=discount,
        shipping_fee=shipping,
        total=total,
    )
    db.add(order)
    db.flush()
    for line, product in zip(items, products, strict=True):
        product.stock -= line.quantity
        db.add(
            OrderItem(
                order_id=order.id, product_id=product.id, quantity=line.quantity, unit_price=product.price
            )
        )
    if coupon:
        coupon.times_used += 1
    db.flush()
    return _order_detail(db, order.id)


def _usable_coupon(db: Session, code: str, subtotal: float) -> Coupon:
    coupon = get_or_raise(db, Coupon, code.strip().upper())
    if coupon.valid_until < TODAY:
        raise PreconditionFailed(f"coupon {coupon.code} expired on {coupon.valid_until.isoformat()}")
    if coupon.times_used >= coupon.max_uses:
        raise LimitExceeded(f"coupon {coupon.code} has reached its limit of {coupon.max_uses} uses")
    if subtotal < coupon.min_subtotal:
        raise PreconditionFailed(
            f"coupon {coupon.code} needs a subtotal of at least {coupon.min_subtotal:.2f}, "
            f"this order's is {subtotal:.2f}"
        )
    return coupon


@env.tool(mutates=True)
def cancel_order(db: Session, order_id: int, reason: str | None = None) -> dict:
    """Cancel an order that has not shipped yet; its stock is released and its coupon use given back.

    Args:
        order_id: The order's id.
        reason: Why the order is cancelled, kept on the order.
    """
    order = get_or_raise(db, Order, order_id)
    if order.status == "cancelled":
        raise Conflict(f"order {order_id} is already cancelled")
    if order.status != "placed":
        raise PreconditionFailed(
            f"order {order_id} is {order.status} and can no longer be cancelled; request a return"
        )
    ordered = db.execute(
        select(Product, OrderItem.quantity)
        .join(OrderItem, OrderItem.product_id == Product.id)
        .where(OrderItem.order_id == order_id)
    )
    for product, quantity in ordered:
        product.stock += quantity
    if order.coupon_code:
        get_or_raise(db, Coupon, order.coupon_code).times_used -= 1
    order.status, order.cancel_reason = "cancelled", reason
    db.flush()
    return _order_detail(db, order.id)


@env.tool(mutates=True)
def ship_order(db: Session, order_id: int, carrier: Carrier) -> dict:
    """Hand a placed order to a carrier today; creates its shipment with a tracking number.

    Args:
        order_id: The order's id.
        carrier: The shipping carrier.
    """
    order = get_or_raise(db, Order, order_id)
    if order.status == "cancelled":
        raise PreconditionFailed(f"order {order_id} is cancelled and cannot be shipped")
    if order.status != "placed":
        raise Conflict(f"order {order_id} has already been shipped")
    shipment = Shipment(
        order_id=order_id,
        carrier=carrier,
        tracking_number=tracking_number(carrier, order_id),
        shipped_on=TODAY,
    )
    db.add(shipment)
    order.status = "shipped"
    db.flush()
    return {**orm_to_dict(shipment), "order_status": order.status}


@env.tool(mutates=True)
def confirm_delivery(db: Session, order_id: int, delivered_on: date | None = None) -> dict:
    """Record that a shipped order was delivered; this opens its 30-day return window.

    Args:
        order_id: The order's id.
        delivered_on: The delivery date (YYYY-MM-DD), between the ship date and today; default: today.
    """
    order = get_or_raise(db, Order, order_id)
    if order.status == "delivered":
        raise Conflict(f"order {order_id} has already been delivered")
    if order.status != "shipped":
        raise PreconditionFailed(f"order {order_id} is {order.status}; only shipped orders can be delivered")
    shipment = db.scalars(select(Shipment).where(Shipment.order_id == order_id)).one()
    delivered_on = delivered_on or TODAY
    if not shipment.shipped_on <= delivered_on <= TODAY:
        raise ValidationFailed(
            f"delivery date {delivered_on.isoformat()} must be between the ship date "
            f"{shipment.shipped_on.isoformat()} and today {TODAY.isoformat()}"
        )
    shipment.delivered_on, order.status = delivered_on, "delivered"
    return {**orm_to_dict(shipment), "order_status": order.status}


@env.tool(mutates=True)
def request_return(
    db: Session, order_id: int, product_id: int, quantity: Annotated[int, Field(ge=1)], reason: ReturnReason
) -> dict:
    """Open a return request for units of one product of a delivered order, within 30 days of delivery.

    Beauty and Grocery products are final sale and cannot be returned.

    Args:
        order_id: The order's id.
        product_id: The product to return, which must be on the order.
        quantity: Units to return; at most the ordered quantity minus units already returned or pending.
        reason: Why the units are returned.
    """
    order = get_or_raise(db, Order, order_id)
    item = db.scalar(
        select(OrderItem).where(OrderItem.order_id == order_id, OrderItem.product_id == product_id)
    )
    if item is None:
        raise NotFound(f"order {order_id} has no item for product {product_id}")
    if order.status != "delivered":
        raise PreconditionFailed(f"order {order_id} is {order.status}; only delivered orders can be returned")
    delivered = db.scalars(select(Shipment.delivered_on).where(Shipment.order_id == order_id)).one()
    deadline = delivered + timedelta(days=RETURN_WINDOW_DAYS)
    if deadline < TODAY:
        raise PreconditionFailed(f"the return window of order {order_id} closed on {deadline.isoformat()}")
    product = get_or_raise(db, Product, product_id)
    if product.category in FINAL_SALE_CATEGORIES:
        raise Forbidden(f"{_label(product)} is a final-sale {product.category} item and cannot be returned")
    item_returns = db.scalars(select(Return).where(Return.order_item_id == item.id))
    returnable = item.quantity - _returned_quantities(item_returns).get(item.id, 0)
    if quantity > returnable:
        raise ValidationFailed(
            f"only {returnable} of {item.quantity} unit(s) of {_label(product)} on order {order_id} "
            f"can still be returned, {quantity} requested"
        )
    ret = Return(
        order_item_id=item.id, quantity=quantity, reason=reason, status="requested", requested_on=TODAY
    )
    db.add(ret)
    db.flush()
    return {**orm_to_dict(ret), "order_id": order_id, "product_id": product_id}


@env.tool(mutates=True)
def process_return(db: Session, return_id: int, decision: Literal["approve", "reject"]) -> dict:
    """Decide a pending return. Approving refunds the units' price less their share of the order discount
    and puts them back in stock, unless they were returned as damaged.

    Args:
        return_id: The return's id.
        decision: Approve (refund) or reject the return.
    """
    ret = get_or_raise(db, Return, return_id)
    if ret.status != "requested":
        raise Conflict(f"return {return_id} has already been {ret.status}")
    item = get_or_raise(db, OrderItem, ret.order_item_id)
    restocked = decision == "approve" and ret.reason != "damaged"
    if decision == "approve":
        order = get_or_raise(db, Order, item.order_id)
        ret.status = "refunded"
        ret.refund_amount = refund_for(item.unit_price, ret.quantity, order.subtotal, order.discount)
    else:
        ret.status = "rejected"
    if restocked:
        get_or_raise(db, Product, item.product_id).stock += ret.quantity
    return {
        **orm_to_dict(ret),
        "order_id": item.order_id,
        "product_id": item.product_id,
        "restocked": restocked,
    }


@env.tool(mutates=True)
def adjust_stock(db: Session, product_id: int, change: int) -> dict:
    """Add received units to a product's stock (positive change) or write off units (negative change).

    Args:
        product_id: The product's id.
        change: Units to add (positive) or remove (negative); not zero. Stock can never go below zero,
            and discontinued products cannot be restocked.
    """
    if change == 0:
        raise ValidationFailed("change must not be zero")
    product = get_or_raise(db, Product, product_id)
    if change > 0 and not product.active:
        raise PreconditionFailed(f"{_label(product)} is discontinued and cannot be restocked")
    if product.stock + change < 0:
        raise Conflict(
            f"{_label(product)} has {product.stock} in stock; cannot remove {-change}",
            in_stock=product.stock,
        )
    product.stock += change
    return orm_to_dict(product)
