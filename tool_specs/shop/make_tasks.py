"""Generate ``tasks.json`` of the shop domain (run: ``PYTHONPATH=. python tool_specs/shop/make_tasks.py``).

The committed ``tasks.json`` is exactly this script's output. Before writing, every task's ground truth
is replayed through ``ShopAPI`` (it must raise nothing) and each ``required_response`` substring must
occur in that turn's tool outputs.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

CLASS = "shop_api:ShopAPI"
ALL_TOOLS = ["search_products", "get_product", "add_to_cart", "remove_from_cart", "view_cart", "apply_coupon",
             "checkout", "list_orders", "get_order", "cancel_order", "update_shipping_address", "return_item",
             "get_account"]
SHIPPING = {"standard": 499, "express": 1299, "overnight": 2499}


def product(pid, name, category, price, stock, description):
    return {"product_id": pid, "name": name, "category": category, "price": price, "stock": stock,
            "description": description}


GADGETS = [
    product("p-101", "Wireless Earbuds", "electronics", 59.99, 12, "Bluetooth 5.3 earbuds with a charging case, 24h battery."),
    product("p-102", "USB-C Charger 65W", "electronics", 29.99, 30, "Compact GaN wall charger for laptops and phones."),
    product("p-103", "Bluetooth Speaker", "electronics", 45.5, 0, "Waterproof portable speaker, 12h playback."),
    product("p-104", "Mechanical Keyboard", "electronics", 89.5, 5, "Tenkeyless keyboard with brown switches."),
    product("p-105", "Ceramic Coffee Mug", "home", 12.99, 40, "350 ml stoneware mug, dishwasher safe."),
    product("p-106", "French Press 1L", "home", 34.95, 8, "Borosilicate glass coffee press with steel filter."),
    product("p-107", "LED Desk Lamp", "home", 27.49, 15, "Dimmable desk lamp with USB charging port."),
    product("p-108", "Noise-Cancelling Headphones", "electronics", 199.0, 3, "Over-ear wireless headphones with active noise cancelling."),
]
BOOKS_TOYS = [
    product("p-201", "The Silent Orbit", "books", 14.99, 20, "A science-fiction novel about a lost space station."),
    product("p-202", "Cooking with Cast Iron", "books", 24.5, 6, "Recipes and care tips for cast iron pans."),
    product("p-203", "Atlas of Rivers", "books", 39.0, 2, "Illustrated atlas of the world's great rivers."),
    product("p-204", "Wooden Train Set", "toys", 49.99, 7, "40-piece wooden railway with bridge and tunnel."),
    product("p-205", "Lighthouse Puzzle 1000 Pieces", "toys", 18.75, 10, "Jigsaw puzzle of a coastal lighthouse."),
    product("p-206", "Plush Otter", "toys", 16.0, 0, "Soft toy otter, 30 cm."),
    product("p-207", "Kids Science Kit", "toys", 32.0, 9, "Twenty safe experiments for ages 8 and up."),
]
OUTDOORS = [
    product("p-301", "Trail Running Shoes", "clothing", 119.0, 4, "Lightweight trail shoes with a grippy sole."),
    product("p-302", "Merino Wool Socks 3-Pack", "clothing", 21.0, 25, "Cushioned hiking socks, three pairs."),
    product("p-303", "Rain Jacket", "clothing", 84.0, 6, "Packable waterproof shell jacket with hood."),
    product("p-304", "Yoga Mat", "sports", 29.0, 14, "6 mm non-slip exercise mat."),
    product("p-305", "Adjustable Dumbbells Pair", "sports", 149.99, 2, "Pair of dumbbells adjustable from 2 to 24 kg."),
    product("p-306", "Insulated Water Bottle", "sports", 24.99, 30, "750 ml stainless steel bottle, keeps drinks cold 24h."),
    product("p-307", "Cycling Helmet", "sports", 64.5, 0, "Ventilated road helmet with MIPS liner."),
]
CATALOGS = {"gadgets": GADGETS, "books_toys": BOOKS_TOYS, "outdoors": OUTDOORS}
ALL_PRODUCTS = {p["product_id"]: p for p in GADGETS + BOOKS_TOYS + OUTDOORS}

COUPONS = {
    "SAVE10": {"code": "SAVE10", "percent_off": 10, "min_subtotal": 0, "category": None, "single_use": False, "used": False, "active": True},
    "WELCOME15": {"code": "WELCOME15", "percent_off": 15, "min_subtotal": 50, "category": None, "single_use": True, "used": False, "active": True},
    "BOOKS20": {"code": "BOOKS20", "percent_off": 20, "min_subtotal": 0, "category": "books", "single_use": False, "used": False, "active": True},
    "TAKE5": {"code": "TAKE5", "amount_off": 5.0, "min_subtotal": 25, "category": None, "single_use": True, "used": False, "active": True},
    "SUMMER30": {"code": "SUMMER30", "percent_off": 30, "min_subtotal": 0, "category": None, "single_use": False, "used": False, "active": False},
}


def address(street, city, zip_code, country):
    return {"street": street, "city": city, "zip_code": zip_code, "country": country}


HOME = address("12 Maple Court", "Columbus", "43004", "US")


def customer(name, email, shipping_address=HOME, store_credit=0.0, cid="c-0001"):
    return {"customer_id": cid, "name": name, "email": email, "shipping_address": shipping_address,
            "store_credit": store_credit}


def order(order_id, items, status, speed="standard", payment="credit_card", percent_off=0, coupon=None,
          ship_to=HOME):
    """An order record exactly as ShopAPI.checkout would have written it."""
    lines = [{"product_id": pid, "name": ALL_PRODUCTS[pid]["name"], "quantity": qty,
              "unit_price": ALL_PRODUCTS[pid]["price"], "returned": False} for pid, qty in items]
    subtotal = sum(int(round(ALL_PRODUCTS[pid]["price"] * 100)) * qty for pid, qty in items)
    discount = int(round(subtotal * percent_off / 100))
    shipping = SHIPPING[speed]
    if speed == "standard" and subtotal - discount >= 5000:
        shipping = 0
    return order_id, {
        "order_id": order_id, "status": status, "items": lines, "subtotal": round(subtotal / 100, 2),
        "discount": round(discount / 100, 2), "coupon": coupon, "shipping_speed": speed,
        "shipping_cost": round(shipping / 100, 2), "total": round((subtotal - discount + shipping) / 100, 2),
        "payment_method": payment, "shipping_address": copy.deepcopy(ship_to), "refunded": 0.0,
    }


def state(catalog, cust, cart=(), orders=(), coupons=("SAVE10", "WELCOME15", "BOOKS20", "TAKE5", "SUMMER30"),
          next_order=None, applied_coupon=None):
    orders = dict(orders)
    numbers = [int(o.split("-")[1]) for o in orders]
    doc = {
        "customer": cust,
        "products": {p["product_id"]: copy.deepcopy(p) for name in catalog.split("+") for p in CATALOGS[name]},
        "cart": [{"product_id": pid, "quantity": qty} for pid, qty in cart],
        "applied_coupon": applied_coupon,
        "coupons": {c: copy.deepcopy(COUPONS[c]) for c in coupons},
        "orders": orders,
        "next_order_number": next_order or (max(numbers) + 1 if numbers else 1001),
    }
    return {CLASS: doc}


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def turn(user, *calls, rr=None, abstain=False, add=None):
    doc = {"user": user, "ground_truth": list(calls)}
    if rr:
        doc["required_response"] = list(rr)
    if abstain:
        doc["expects_abstention"] = True
    if add:
        doc["add_tools"] = list(add)
    return doc


def task(tid, category, initial_state, turns, without=None):
    doc = {"id": tid, "category": category, "initial_state": initial_state}
    if without:
        doc["tools"] = [t for t in ALL_TOOLS if t != without]
    doc["turns"] = turns
    return doc


ALICE = customer("Alice Moreno", "alice@example.com")
BEN = customer("Ben Okafor", "ben.okafor@example.com", store_credit=80.0, cid="c-0002")
CHLOE = customer("Chloe Park", "chloe.park@example.com", shipping_address=None, cid="c-0003")
DEV = customer("Dev Raman", "dev.raman@example.com", address("300 Lakeshore Blvd", "Chicago", "60601", "US"),
               store_credit=15.5, cid="c-0004")
EMMA = customer("Emma Lindqvist", "emma.l@example.com", address("Sveavagen 44", "Stockholm", "11134", "SE"),
                store_credit=120.0, cid="c-0005")


def base_tasks():
    t = []
    t.append(task("shop_base_001", "base", state("gadgets", ALICE), [
        turn("I'm looking for wireless earbuds under $80. What do you have?",
             call("search_products", query="earbuds", max_price=80), rr=["59.99"]),
        turn("Great, add two of those earbuds to my cart.", call("add_to_cart", product_id="p-101", quantity=2)),
        turn("Check out with standard shipping and my credit card. What's the order number?",
             call("checkout", shipping_speed="standard", payment_method="credit_card"), rr=["ORD-1001"]),
    ]))
    t.append(task("shop_base_002", "base", state("gadgets", ALICE, cart=[("p-105", 2), ("p-107", 1)]), [
        turn("What's in my cart right now, and what's the subtotal?", call("view_cart"), rr=["53.47"]),
        turn("Take the desk lamp out.", call("remove_from_cart", product_id="p-107")),
        turn("Apply my TAKE5 code, then check out with express shipping via PayPal.",
             call("apply_coupon", code="TAKE5"), call("checkout", shipping_speed="express", payment_method="paypal"),
             rr=["33.97"]),
    ]))
    t.append(task("shop_base_003", "base", state("gadgets", ALICE, orders=[
        order("ORD-1001", [("p-108", 1)], "processing", speed="express"),
        order("ORD-1002", [("p-102", 1), ("p-105", 1)], "delivered")]), [
        turn("What's the status of my order ORD-1002?", call("get_order", order_id="ORD-1002"), rr=["delivered"]),
        turn("And please cancel ORD-1001, I found the headphones cheaper somewhere else. How much do I get back?",
             call("cancel_order", order_id="ORD-1001", reason="found_cheaper"), rr=["211.99"]),
    ]))
    t.append(task("shop_base_004", "base", state("gadgets", ALICE), [
        turn("I've moved. My new address is 48 Elm Street, Portland, 97205, US.",
             call("update_shipping_address", street="48 Elm Street", city="Portland", zip_code="97205", country="US")),
        turn("Do you sell a French press? If so, put one in my cart.",
             call("search_products", query="french press"), call("add_to_cart", product_id="p-106", quantity=1)),
        turn("Ship it overnight, paid with PayPal. What's the total?",
             call("checkout", shipping_speed="overnight", payment_method="paypal"), rr=["59.94"]),
    ]))
    t.append(task("shop_base_005", "base", state("gadgets", ALICE, orders=[
        order("ORD-1003", [("p-104", 1), ("p-105", 2)], "delivered", percent_off=10, coupon="SAVE10")]), [
        turn("I'd like to return the mechanical keyboard from order ORD-1003. How much will be refunded?",
             call("return_item", order_id="ORD-1003", product_id="p-104"), rr=["80.55"]),
        turn("Return the two mugs from that order too.", call("return_item", order_id="ORD-1003", product_id="p-105")),
        turn("What's the status of ORD-1003 now?", call("get_order", order_id="ORD-1003"), rr=["returned"]),
    ]))
    t.append(task("shop_base_006", "base", state("books_toys", BEN), [
        turn("How much store credit do I have?", call("get_account"), rr=["80.0"]),
        turn("Add the Kids Science Kit (p-207) and the lighthouse puzzle (p-205) to my cart.",
             call("add_to_cart", product_id="p-207", quantity=1), call("add_to_cart", product_id="p-205", quantity=1)),
        turn("Check out with standard shipping and pay with my store credit.",
             call("checkout", shipping_speed="standard", payment_method="store_credit")),
        turn("How much store credit is left now?", call("get_account"), rr=["29.25"]),
    ]))
    t.append(task("shop_base_007", "base", state("books_toys", ALICE), [
        turn("Show me books that cost $30 or less.", call("search_products", query="", category="books", max_price=30),
             rr=["The Silent Orbit", "Cooking with Cast Iron"]),
        turn("Add three copies of The Silent Orbit.", call("add_to_cart", product_id="p-201", quantity=3)),
        turn("I have the code BOOKS20, apply it please. What's the discount?", call("apply_coupon", code="BOOKS20"),
             rr=["8.99"]),
        turn("Check out, standard shipping, PayPal.", call("checkout", shipping_speed="standard", payment_method="paypal"),
             rr=["40.97"]),
    ]))
    t.append(task("shop_base_008", "base", state("outdoors", DEV, orders=[
        order("ORD-1004", [("p-303", 1)], "delivered"),
        order("ORD-1005", [("p-304", 1), ("p-306", 2)], "processing")]), [
        turn("Which of my orders are still processing?", call("list_orders", status="processing"), rr=["ORD-1005"]),
        turn("Please send that order to my office instead: 9 Harbor Road, Boston, 02110, US.",
             call("update_shipping_address", street="9 Harbor Road", city="Boston", zip_code="02110", country="US",
                  order_id="ORD-1005")),
        turn("What's that order's total?", call("get_order", order_id="ORD-1005"), rr=["78.98"]),
    ]))
    t.append(task("shop_base_009", "base", state("gadgets", ALICE), [
        turn("Is the Bluetooth speaker p-103 available?", call("get_product", product_id="p-103"), rr=["Bluetooth Speaker"]),
        turn("Then find me noise-cancelling headphones in electronics under $250 that are in stock.",
             call("search_products", query="headphones", category="electronics", max_price=250, in_stock_only=True),
             rr=["199.0"]),
        turn("Add them and check out with overnight shipping on my credit card. What's the total?",
             call("add_to_cart", product_id="p-108", quantity=1),
             call("checkout", shipping_speed="overnight", payment_method="credit_card"), rr=["223.99"]),
    ]))
    t.append(task("shop_base_010", "base", state("outdoors", DEV, cart=[("p-302", 3), ("p-306", 2)]), [
        turn("Remove one pack of the merino socks from my cart.", call("remove_from_cart", product_id="p-302", quantity=1)),
        turn("Add a yoga mat, product p-304.", call("add_to_cart", product_id="p-304", quantity=1)),
        turn("What's my cart subtotal now?", call("view_cart"), rr=["120.98"]),
    ]))
    t.append(task("shop_base_011", "base", state("outdoors", EMMA, cart=[("p-301", 1)]), [
        turn("I have a welcome code, WELCOME15. Please apply it to my cart. How much do I save?",
             call("apply_coupon", code="WELCOME15"), rr=["17.85"]),
        turn("Check out with express shipping via PayPal.",
             call("checkout", shipping_speed="express", payment_method="paypal"), rr=["114.14"]),
    ]))
    t.append(task("shop_base_012", "base", state("books_toys", ALICE, orders=[
        order("ORD-1010", [("p-204", 2)], "processing", speed="overnight")]), [
        turn("Please cancel order ORD-1010, I ordered it by mistake with overnight shipping.",
             call("cancel_order", order_id="ORD-1010", reason="ordered_by_mistake"), rr=["124.97"]),
        turn("Now put two Wooden Train Sets (p-204) back in my cart and check out with standard shipping on my credit card.",
             call("add_to_cart", product_id="p-204", quantity=2),
             call("checkout", shipping_speed="standard", payment_method="credit_card"), rr=["ORD-1011"]),
    ]))
    t.append(task("shop_base_013", "base", state("books_toys", CHLOE), [
        turn("Please set my shipping address to 221 Baker Street, London, NW1 6XE, GB.",
             call("update_shipping_address", street="221 Baker Street", city="London", zip_code="NW1 6XE", country="GB")),
        turn("Add Cooking with Cast Iron (p-202) and Atlas of Rivers (p-203) to my cart.",
             call("add_to_cart", product_id="p-202", quantity=1), call("add_to_cart", product_id="p-203", quantity=1)),
        turn("Check out with standard shipping, credit card. Do I pay for shipping?",
             call("checkout", shipping_speed="standard", payment_method="credit_card"), rr=["63.5"]),
    ]))
    t.append(task("shop_base_014", "base", state("outdoors", EMMA, orders=[
        order("ORD-1020", [("p-303", 1), ("p-302", 2)], "delivered", payment="store_credit")]), [
        turn("I want to return the rain jacket from order ORD-1020.",
             call("return_item", order_id="ORD-1020", product_id="p-303"), rr=["84.0"]),
        turn("What's my store credit balance now?", call("get_account"), rr=["204.0"]),
    ]))
    t.append(task("shop_base_015", "base", state("gadgets", ALICE, orders=[
        order("ORD-1001", [("p-101", 1)], "delivered"),
        order("ORD-1002", [("p-104", 1), ("p-102", 2)], "shipped", speed="express"),
        order("ORD-1003", [("p-106", 1)], "cancelled")]), [
        turn("Can you list all my orders?", call("list_orders"), rr=["ORD-1001", "ORD-1002", "ORD-1003"]),
        turn("How much did I pay for ORD-1002, and how was it shipped?", call("get_order", order_id="ORD-1002"),
             rr=["162.47", "express"]),
    ]))
    t.append(task("shop_base_016", "base", state("outdoors", DEV), [
        turn("Put both of the adjustable dumbbells (p-305) in my cart.", call("add_to_cart", product_id="p-305", quantity=2)),
        turn("Actually, just one pair is enough.", call("remove_from_cart", product_id="p-305", quantity=1)),
        turn("Check out with overnight shipping, PayPal.",
             call("checkout", shipping_speed="overnight", payment_method="paypal"), rr=["174.98"]),
    ]))
    t.append(task("shop_base_017", "base", state("gadgets", BEN), [
        turn("Do you have coffee mugs?", call("search_products", query="mug"), rr=["12.99"]),
        turn("Add four of them, and apply coupon SAVE10.",
             call("add_to_cart", product_id="p-105", quantity=4), call("apply_coupon", code="SAVE10")),
        turn("What's my total before shipping?", call("view_cart"), rr=["46.76"]),
    ]))
    t.append(task("shop_base_018", "base", state("books_toys", EMMA, orders=[
        order("ORD-1030", [("p-207", 1)], "processing")]), [
        turn("Update my account's shipping address to Kungsgatan 5, Gothenburg, 41119, SE.",
             call("update_shipping_address", street="Kungsgatan 5", city="Gothenburg", zip_code="41119", country="SE")),
        turn("My pending order ORD-1030 should go to the new address too.",
             call("update_shipping_address", street="Kungsgatan 5", city="Gothenburg", zip_code="41119", country="SE",
                  order_id="ORD-1030")),
        turn("Which address is on ORD-1030 now?", call("get_order", order_id="ORD-1030"), rr=["Gothenburg"]),
    ]))
    t.append(task("shop_base_019", "base", state("gadgets", ALICE), [
        turn("How much are p-101 and p-108?", call("get_product", product_id="p-101"),
             call("get_product", product_id="p-108"), rr=["59.99", "199"]),
        turn("Add the cheaper one to my cart, and a USB-C charger p-102 as well.",
             call("add_to_cart", product_id="p-101", quantity=1), call("add_to_cart", product_id="p-102", quantity=1)),
        turn("Use SAVE10 and check out with standard shipping on my credit card.",
             call("apply_coupon", code="SAVE10"),
             call("checkout", shipping_speed="standard", payment_method="credit_card"), rr=["80.98"]),
    ]))
    t.append(task("shop_base_020", "base", state("books_toys", DEV, cart=[("p-201", 1), ("p-205", 1)]), [
        turn("Apply TAKE5 to my cart, please.", call("apply_coupon", code="TAKE5"), rr=["28.74"]),
        turn("Check out with standard shipping and PayPal. What is the total?",
             call("checkout", shipping_speed="standard", payment_method="paypal"), rr=["33.73"]),
        turn("Show me my orders that are processing.", call("list_orders", status="processing"), rr=["ORD-1001"]),
    ]))
    t.append(task("shop_base_021", "base", state("outdoors", BEN, orders=[
        order("ORD-1040", [("p-301", 1), ("p-306", 1)], "delivered", percent_off=15, coupon="WELCOME15"),
        order("ORD-1041", [("p-304", 2)], "shipped")]), [
        turn("Which of my orders were delivered?", call("list_orders", status="delivered"), rr=["ORD-1040"]),
        turn("Return the water bottle from that order. What's the refund?",
             call("return_item", order_id="ORD-1040", product_id="p-306"), rr=["21.24"]),
        turn("And the shoes from it as well.", call("return_item", order_id="ORD-1040", product_id="p-301"),
             rr=["101.15"]),
    ]))
    t.append(task("shop_base_022", "base", state("gadgets+outdoors", EMMA), [
        turn("I need something for my commute in the rain — any jackets?",
             call("search_products", query="jacket", category="clothing"), rr=["84.0"]),
        turn("Add the rain jacket and one insulated water bottle.",
             call("add_to_cart", product_id="p-303", quantity=1), call("add_to_cart", product_id="p-306", quantity=1)),
        turn("Check out with standard shipping using my store credit, and tell me what's left of it.",
             call("checkout", shipping_speed="standard", payment_method="store_credit"), call("get_account"),
             rr=["11.01"]),
    ]))
    t.append(task("shop_base_023", "base", state("books_toys", CHLOE, cart=[("p-204", 1), ("p-207", 2)]), [
        turn("What does my cart come to?", call("view_cart"), rr=["113.99"]),
        turn("Remove all of the science kits.", call("remove_from_cart", product_id="p-207")),
        turn("Ship to 19 Rue Cler, Paris, 75007, FR.",
             call("update_shipping_address", street="19 Rue Cler", city="Paris", zip_code="75007", country="FR")),
        turn("Now check out with standard shipping by credit card.",
             call("checkout", shipping_speed="standard", payment_method="credit_card"), rr=["54.98"]),
    ]))
    return t


def miss_param_tasks():
    t = []
    t.append(task("shop_miss_param_001", "miss_param", state("gadgets", ALICE, cart=[("p-104", 1)]), [
        turn("Please check out my cart, I'll pay with PayPal."),
        turn("Express shipping, please.", call("checkout", shipping_speed="express", payment_method="paypal"),
             rr=["102.49"]),
    ]))
    t.append(task("shop_miss_param_002", "miss_param", state("outdoors", DEV), [
        turn("Update my shipping address to 77 Pine Avenue, Denver."),
        turn("The zip code is 80202 and the country is US.",
             call("update_shipping_address", street="77 Pine Avenue", city="Denver", zip_code="80202", country="US")),
        turn("Which address do you have on file for me now?", call("get_account"), rr=["77 Pine Avenue"]),
    ]))
    t.append(task("shop_miss_param_003", "miss_param", state("books_toys", BEN, orders=[
        order("ORD-1050", [("p-203", 1), ("p-201", 2)], "processing")]), [
        turn("What's in order ORD-1050?", call("get_order", order_id="ORD-1050"), rr=["Atlas of Rivers"]),
        turn("Cancel that order."),
        turn("I simply changed my mind.", call("cancel_order", order_id="ORD-1050", reason="changed_mind"),
             rr=["68.98"]),
    ]))
    t.append(task("shop_miss_param_004", "miss_param", state("gadgets", DEV, orders=[
        order("ORD-1060", [("p-106", 1), ("p-107", 1)], "delivered")]), [
        turn("I want to return something from order ORD-1060."),
        turn("The French press.", call("return_item", order_id="ORD-1060", product_id="p-106"), rr=["34.95"]),
    ]))
    t.append(task("shop_miss_param_005", "miss_param", state("outdoors", EMMA, cart=[("p-304", 1), ("p-302", 1)]), [
        turn("Place the order for my cart with overnight shipping."),
        turn("Use my store credit.", call("checkout", shipping_speed="overnight", payment_method="store_credit")),
        turn("How much store credit do I have left?", call("get_account"), rr=["45.01"]),
    ]))
    t.append(task("shop_miss_param_006", "miss_param", state("books_toys", ALICE, cart=[("p-202", 2)]), [
        turn("I'd like to use a coupon on my cart."),
        turn("The code is SAVE10.", call("apply_coupon", code="SAVE10"), rr=["4.9"]),
        turn("Great, check out with standard shipping on my credit card.",
             call("checkout", shipping_speed="standard", payment_method="credit_card"), rr=["49.09"]),
    ]))
    t.append(task("shop_miss_param_007", "miss_param", state("gadgets", BEN, orders=[
        order("ORD-1070", [("p-101", 1)], "processing")]), [
        turn("Change the delivery address of ORD-1070 to 5 Lake Drive, Madison, US."),
        turn("Oh, the zip is 53703.",
             call("update_shipping_address", street="5 Lake Drive", city="Madison", zip_code="53703", country="US",
                  order_id="ORD-1070")),
    ]))
    return t


def miss_func_tasks():
    t = []
    t.append(task("shop_miss_func_001", "miss_func", state("gadgets", ALICE, orders=[
        order("ORD-1080", [("p-104", 1)], "processing")]), [
        turn("What's the status of ORD-1080?", call("get_order", order_id="ORD-1080"), rr=["processing"]),
        turn("Cancel it please, the shipping is too slow.", abstain=True),
        turn("Order cancellation is available to you now, please go ahead and cancel it.",
             call("cancel_order", order_id="ORD-1080", reason="shipping_too_slow"), add=["cancel_order"]),
    ], without="cancel_order"))
    t.append(task("shop_miss_func_002", "miss_func", state("books_toys", DEV), [
        turn("Add two Lighthouse puzzles (p-205) to my cart.", call("add_to_cart", product_id="p-205", quantity=2)),
        turn("Apply the code SAVE10.", abstain=True),
        turn("Coupons work again now, please apply SAVE10.", call("apply_coupon", code="SAVE10"),
             add=["apply_coupon"], rr=["33.75"]),
    ], without="apply_coupon"))
    t.append(task("shop_miss_func_003", "miss_func", state("outdoors", ALICE, orders=[
        order("ORD-1090", [("p-304", 1), ("p-302", 1)], "delivered")]), [
        turn("Return the yoga mat from ORD-1090.", abstain=True),
        turn("Returns are enabled for you now. Please return the yoga mat from ORD-1090.",
             call("return_item", order_id="ORD-1090", product_id="p-304"), add=["return_item"], rr=["29.0"]),
    ], without="return_item"))
    t.append(task("shop_miss_func_004", "miss_func", state("gadgets", CHLOE), [
        turn("Add an LED desk lamp (p-107) to my cart.", call("add_to_cart", product_id="p-107", quantity=1)),
        turn("Set my shipping address to 8 Willow Way, Austin, 73301, US.", abstain=True),
        turn("You can edit addresses now; please set it to 8 Willow Way, Austin, 73301, US.",
             call("update_shipping_address", street="8 Willow Way", city="Austin", zip_code="73301", country="US"),
             add=["update_shipping_address"]),
        turn("Check out with standard shipping and PayPal.",
             call("checkout", shipping_speed="standard", payment_method="paypal"), rr=["32.48"]),
    ], without="update_shipping_address"))
    t.append(task("shop_miss_func_005", "miss_func", state("books_toys", EMMA, cart=[("p-203", 2)]), [
        turn("What's my cart subtotal?", call("view_cart"), rr=["78.0"]),
        turn("Check out with express shipping using store credit.", abstain=True),
        turn("Checkout is back online. Please place the order: express shipping, store credit.",
             call("checkout", shipping_speed="express", payment_method="store_credit"), add=["checkout"],
             rr=["90.99"]),
    ], without="checkout"))
    t.append(task("shop_miss_func_006", "miss_func", state("outdoors", BEN), [
        turn("Search the store for water bottles.", abstain=True),
        turn("Search is working again. Find me water bottles under $30.",
             call("search_products", query="water bottle", max_price=30), add=["search_products"], rr=["24.99"]),
        turn("Add three of them to my cart.", call("add_to_cart", product_id="p-306", quantity=3)),
    ], without="search_products"))
    return t


def verify(tasks):
    """Replay each task's ground truth; raise if a call fails or a required substring is in no output."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from shop_api import ShopAPI

    for doc in tasks:
        api = ShopAPI()
        api._load_scenario(doc["initial_state"][CLASS])
        tools = set(doc.get("tools", ALL_TOOLS))
        for i, tr in enumerate(doc["turns"]):
            tools |= set(tr.get("add_tools", []))
            outputs = []
            for c in tr["ground_truth"]:
                assert c["name"] in tools, (doc["id"], i, c["name"])
                try:
                    outputs.append(json.dumps(getattr(api, c["name"])(**c["arguments"])).lower())
                except Exception as exc:
                    raise AssertionError(f"{doc['id']} turn {i}: {c} raised {exc!r}") from exc
            for needle in tr.get("required_response", []):
                assert any(needle.lower() in o for o in outputs), (doc["id"], i, needle, outputs)


def main() -> None:
    tasks = base_tasks() + miss_param_tasks() + miss_func_tasks()
    verify(tasks)
    out = Path(__file__).with_name("tasks.json")
    out.write_text(json.dumps({"domain": "shop", "tasks": tasks}, indent=2) + "\n")
    print(f"wrote {len(tasks)} tasks to {out}")


if __name__ == "__main__":
    main()
