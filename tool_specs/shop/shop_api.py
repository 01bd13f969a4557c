"""Shop: the customer-support backend of an online store (SEAL's first-party example domain).

Standard library only: this module is imported inside the sandbox, whose Python guarantees nothing else.
State lives in public, JSON-friendly attributes (the verifier snapshots them); every tool validates its
inputs and raises ``ValueError`` (bad value / action not allowed now) or ``NotFoundError`` (a ``KeyError``
for unknown ids) with a message that says what went wrong. Deterministic: no clock, no randomness;
order ids come from the ``next_order_number`` counter.
"""

from __future__ import annotations

import copy
from typing import Any

CATEGORIES = ("electronics", "home", "clothing", "books", "sports", "toys")
SHIPPING_SPEEDS = ("standard", "express", "overnight")
SHIPPING_COST_CENTS = {"standard": 499, "express": 1299, "overnight": 2499}
FREE_STANDARD_SHIPPING_FROM_CENTS = 5000  # order value after discount
PAYMENT_METHODS = ("credit_card", "paypal", "store_credit")
ORDER_STATUSES = ("processing", "shipped", "delivered", "cancelled", "returned")
CANCEL_REASONS = ("changed_mind", "found_cheaper", "ordered_by_mistake", "shipping_too_slow", "other")


class NotFoundError(KeyError):
    """An id that names nothing; unlike a bare KeyError its message is printed without extra quotes."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not found"


def _cents(amount: float) -> int:
    return int(round(float(amount) * 100))


def _money(cents: int) -> float:
    return round(cents / 100, 2)


def _require_str(name: str, value: Any, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must not be empty")
    return value


def _require_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def _require_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


class ShopAPI:
    """One customer's session with the store: catalog, cart, coupons, orders and account."""

    def __init__(self) -> None:
        self.customer: dict[str, Any] = {
            "customer_id": "c-0001", "name": "", "email": "", "shipping_address": None, "store_credit": 0.0,
        }
        self.products: dict[str, dict[str, Any]] = {}
        self.cart: list[dict[str, Any]] = []
        self.applied_coupon: str | None = None
        self.coupons: dict[str, dict[str, Any]] = {}
        self.orders: dict[str, dict[str, Any]] = {}
        self.next_order_number: int = 1001

    def _load_scenario(self, state: dict[str, Any]) -> None:
        """Load an initial state (missing keys keep their defaults); the state is deep-copied."""
        state = copy.deepcopy(state or {})
        unknown = set(state) - {"customer", "products", "cart", "applied_coupon", "coupons", "orders",
                                "next_order_number"}
        if unknown:
            raise ValueError(f"unknown shop state keys: {', '.join(sorted(unknown))}")
        if "customer" in state:
            self.customer.update(state["customer"])
        for key in ("products", "cart", "applied_coupon", "coupons", "orders", "next_order_number"):
            if key in state:
                setattr(self, key, state[key])

    # ------------------------------------------------------------------ helpers
    def _product(self, product_id: Any) -> dict[str, Any]:
        _require_str("product_id", product_id)
        if product_id not in self.products:
            raise NotFoundError(f"no product with id {product_id!r}")
        return self.products[product_id]

    def _order(self, order_id: Any) -> dict[str, Any]:
        _require_str("order_id", order_id)
        if order_id not in self.orders:
            known = ", ".join(self.orders) or "none"
            raise NotFoundError(f"no order with id {order_id!r} (this customer's orders: {known})")
        return self.orders[order_id]

    def _cart_line(self, product_id: str) -> dict[str, Any] | None:
        for line in self.cart:
            if line["product_id"] == product_id:
                return line
        return None

    def _coupon_discount(self, code: str | None) -> tuple[int, str | None]:
        """Discount in cents for the current cart, and why it is zero when it is."""
        if code is None:
            return 0, None
        coupon = self.coupons[code]
        subtotal = sum(_cents(self.products[l["product_id"]]["price"]) * l["quantity"] for l in self.cart)
        if subtotal < _cents(coupon.get("min_subtotal", 0)):
            return 0, f"coupon {code} needs a subtotal of at least {coupon.get('min_subtotal', 0):.2f}"
        category = coupon.get("category")
        eligible = sum(_cents(self.products[l["product_id"]]["price"]) * l["quantity"] for l in self.cart
                       if category is None or self.products[l["product_id"]]["category"] == category)
        if eligible == 0:
            return 0, f"coupon {code} only applies to {category} items"
        if coupon.get("percent_off"):
            return int(round(eligible * coupon["percent_off"] / 100)), None
        return min(eligible, _cents(coupon.get("amount_off", 0))), None

    def _summary(self, product: dict[str, Any]) -> dict[str, Any]:
        return {k: product[k] for k in ("product_id", "name", "category", "price", "stock")}

    # ------------------------------------------------------------------ catalog
    def search_products(self, query: str, category: str | None = None, max_price: float | None = None,
                        in_stock_only: bool = False) -> dict[str, Any]:
        """Products whose name, description or category contain every word of ``query``."""
        _require_str("query", query, allow_empty=True)
        if category is not None:
            _require_choice("category", category, CATEGORIES)
        if max_price is not None:
            if isinstance(max_price, bool) or not isinstance(max_price, (int, float)) or max_price < 0:
                raise ValueError(f"max_price must be a non-negative number, got {max_price!r}")
        if not isinstance(in_stock_only, bool):
            raise ValueError(f"in_stock_only must be true or false, got {in_stock_only!r}")
        words = query.lower().split()
        found = []
        for product in self.products.values():
            text = " ".join((product["name"], product.get("description", ""), product["category"])).lower()
            if not all(w in text for w in words):
                continue
            if category is not None and product["category"] != category:
                continue
            if max_price is not None and _cents(product["price"]) > _cents(max_price):
                continue
            if in_stock_only and product["stock"] <= 0:
                continue
            found.append(self._summary(product))
        return {"count": len(found), "products": found}

    def get_product(self, product_id: str) -> dict[str, Any]:
        """Full details of one product."""
        return copy.deepcopy(self._product(product_id))

    # ------------------------------------------------------------------ cart
    def view_cart(self) -> dict[str, Any]:
        """Cart lines, subtotal, applied coupon and discount."""
        items, subtotal = [], 0
        for line in self.cart:
            product = self.products[line["product_id"]]
            line_cents = _cents(product["price"]) * line["quantity"]
            subtotal += line_cents
            items.append({"product_id": line["product_id"], "name": product["name"], "quantity": line["quantity"],
                          "unit_price": product["price"], "line_total": _money(line_cents)})
        discount, note = self._coupon_discount(self.applied_coupon)
        result = {"items": items, "item_count": sum(l["quantity"] for l in self.cart),
                  "subtotal": _money(subtotal), "coupon": self.applied_coupon, "discount": _money(discount),
                  "total_before_shipping": _money(subtotal - discount)}
        if note:
            result["coupon_note"] = note
        return result

    def add_to_cart(self, product_id: str, quantity: int = 1) -> dict[str, Any]:
        product = self._product(product_id)
        _require_int("quantity", quantity)
        line = self._cart_line(product_id)
        in_cart = line["quantity"] if line else 0
        if in_cart + quantity > product["stock"]:
            raise ValueError(f"only {product['stock']} of {product_id!r} ({product['name']}) in stock; "
                             f"the cart already holds {in_cart}, cannot add {quantity} more")
        if line:
            line["quantity"] += quantity
        else:
            self.cart.append({"product_id": product_id, "quantity": quantity})
        return self.view_cart()

    def remove_from_cart(self, product_id: str, quantity: int | None = None) -> dict[str, Any]:
        """Remove a product from the cart (all of it, or ``quantity`` units)."""
        _require_str("product_id", product_id)
        line = self._cart_line(product_id)
        if line is None:
            held = ", ".join(l["product_id"] for l in self.cart) or "nothing"
            raise NotFoundError(f"product {product_id!r} is not in the cart (the cart holds {held})")
        if quantity is not None:
            _require_int("quantity", quantity)
            if quantity > line["quantity"]:
                raise ValueError(f"the cart holds only {line['quantity']} of {product_id!r}, cannot remove {quantity}")
        if quantity is None or quantity == line["quantity"]:
            self.cart.remove(line)
        else:
            line["quantity"] -= quantity
        if not self.cart:
            self.applied_coupon = None
        return self.view_cart()

    def apply_coupon(self, code: str) -> dict[str, Any]:
        _require_str("code", code)
        normalized = code.strip().upper()
        coupon = self.coupons.get(normalized)
        if coupon is None:
            raise NotFoundError(f"no coupon with code {code!r}")
        if not coupon.get("active", True):
            raise ValueError(f"coupon {normalized} has expired")
        if coupon.get("used"):
            raise ValueError(f"coupon {normalized} has already been used")
        if not self.cart:
            raise ValueError("the cart is empty; add items before applying a coupon")
        discount, note = self._coupon_discount(normalized)
        if note:
            raise ValueError(note)
        self.applied_coupon = normalized
        return self.view_cart()

    def checkout(self, shipping_speed: str, payment_method: str) -> dict[str, Any]:
        """Place an order for the cart's contents, shipped to the customer's address."""
        _require_choice("shipping_speed", shipping_speed, SHIPPING_SPEEDS)
        _require_choice("payment_method", payment_method, PAYMENT_METHODS)
        if not self.cart:
            raise ValueError("the cart is empty; nothing to check out")
        if not self.customer.get("shipping_address"):
            raise ValueError("no shipping address on file; set one with update_shipping_address first")
        for line in self.cart:
            product = self.products[line["product_id"]]
            if line["quantity"] > product["stock"]:
                raise ValueError(f"only {product['stock']} of {line['product_id']!r} ({product['name']}) in stock")
        cart = self.view_cart()
        subtotal, discount = _cents(cart["subtotal"]), _cents(cart["discount"])
        shipping = SHIPPING_COST_CENTS[shipping_speed]
        if shipping_speed == "standard" and subtotal - discount >= FREE_STANDARD_SHIPPING_FROM_CENTS:
            shipping = 0
        total = subtotal - discount + shipping
        if payment_method == "store_credit" and _cents(self.customer.get("store_credit", 0)) < total:
            raise ValueError(f"store credit {self.customer.get('store_credit', 0):.2f} does not cover "
                             f"the total {_money(total):.2f}")
        order_id = f"ORD-{self.next_order_number}"
        self.next_order_number += 1
        order = {
            "order_id": order_id, "status": "processing",
            "items": [{"product_id": i["product_id"], "name": i["name"], "quantity": i["quantity"],
                       "unit_price": i["unit_price"], "returned": False} for i in cart["items"]],
            "subtotal": cart["subtotal"], "discount": cart["discount"] if discount else 0.0,
            "coupon": self.applied_coupon if discount else None, "shipping_speed": shipping_speed,
            "shipping_cost": _money(shipping), "total": _money(total), "payment_method": payment_method,
            "shipping_address": copy.deepcopy(self.customer["shipping_address"]), "refunded": 0.0,
        }
        for line in self.cart:
            self.products[line["product_id"]]["stock"] -= line["quantity"]
        if payment_method == "store_credit":
            self.customer["store_credit"] = _money(_cents(self.customer["store_credit"]) - total)
        if discount and self.coupons[self.applied_coupon].get("single_use"):
            self.coupons[self.applied_coupon]["used"] = True
        self.orders[order_id] = order
        self.cart = []
        self.applied_coupon = None
        return copy.deepcopy(order)

    # ------------------------------------------------------------------ orders
    def list_orders(self, status: str | None = None) -> dict[str, Any]:
        if status is not None:
            _require_choice("status", status, ORDER_STATUSES)
        orders = [{"order_id": o["order_id"], "status": o["status"], "total": o["total"],
                   "item_count": sum(i["quantity"] for i in o["items"])}
                  for o in self.orders.values() if status is None or o["status"] == status]
        return {"count": len(orders), "orders": orders}

    def get_order(self, order_id: str) -> dict[str, Any]:
        return copy.deepcopy(self._order(order_id))

    def _refund(self, order: dict[str, Any], cents: int) -> str:
        order["refunded"] = _money(_cents(order.get("refunded", 0)) + cents)
        if order["payment_method"] == "store_credit":
            self.customer["store_credit"] = _money(_cents(self.customer.get("store_credit", 0)) + cents)
        return order["payment_method"]

    def cancel_order(self, order_id: str, reason: str) -> dict[str, Any]:
        """Cancel an order that has not shipped yet; refunds it in full and restocks its items."""
        order = self._order(order_id)
        _require_choice("reason", reason, CANCEL_REASONS)
        if order["status"] != "processing":
            hint = " (items of a delivered order can be returned instead)" if order["status"] in ("shipped", "delivered") else ""
            raise ValueError(f"order {order_id!r} is {order['status']} and can no longer be cancelled{hint}")
        for item in order["items"]:
            if item["product_id"] in self.products:
                self.products[item["product_id"]]["stock"] += item["quantity"]
        refund = _cents(order["total"]) - _cents(order.get("refunded", 0))
        method = self._refund(order, refund)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        return {"order_id": order_id, "status": "cancelled", "refunded": _money(refund), "refund_method": method}

    def update_shipping_address(self, street: str, city: str, zip_code: str, country: str,
                                order_id: str | None = None) -> dict[str, Any]:
        """Set the customer's shipping address, or (with ``order_id``) that of an unshipped order."""
        for name, value in (("street", street), ("city", city), ("zip_code", zip_code)):
            _require_str(name, value)
        _require_str("country", country)
        if len(country) != 2 or not country.isalpha():
            raise ValueError(f"country must be a two-letter ISO code such as 'US', got {country!r}")
        address = {"street": street.strip(), "city": city.strip(), "zip_code": zip_code.strip(),
                   "country": country.upper()}
        if order_id is None:
            self.customer["shipping_address"] = address
            return {"updated": "customer", "shipping_address": copy.deepcopy(address)}
        order = self._order(order_id)
        if order["status"] != "processing":
            raise ValueError(f"order {order_id!r} is {order['status']}; its address can no longer be changed")
        order["shipping_address"] = address
        return {"updated": order_id, "shipping_address": copy.deepcopy(address)}

    def return_item(self, order_id: str, product_id: str) -> dict[str, Any]:
        """Return one line of a delivered order; refunds its share of the paid amount and restocks it."""
        order = self._order(order_id)
        _require_str("product_id", product_id)
        if order["status"] not in ("delivered", "returned"):
            raise ValueError(f"order {order_id!r} is {order['status']}; only delivered orders accept returns")
        item = next((i for i in order["items"] if i["product_id"] == product_id), None)
        if item is None:
            held = ", ".join(i["product_id"] for i in order["items"])
            raise NotFoundError(f"order {order_id!r} has no item {product_id!r} (it holds {held})")
        if item["returned"]:
            raise ValueError(f"{product_id!r} of order {order_id!r} was already returned")
        line = _cents(item["unit_price"]) * item["quantity"]
        subtotal = _cents(order["subtotal"])
        refund = line - (int(round(_cents(order["discount"]) * line / subtotal)) if subtotal else 0)
        item["returned"] = True
        if product_id in self.products:
            self.products[product_id]["stock"] += item["quantity"]
        method = self._refund(order, refund)
        if all(i["returned"] for i in order["items"]):
            order["status"] = "returned"
        return {"order_id": order_id, "product_id": product_id, "quantity": item["quantity"],
                "refunded": _money(refund), "refund_method": method, "order_status": order["status"]}

    # ------------------------------------------------------------------ account
    def get_account(self) -> dict[str, Any]:
        """The customer's profile: name, email, shipping address and store credit."""
        return copy.deepcopy(self.customer)
