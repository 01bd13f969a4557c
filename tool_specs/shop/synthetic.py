"""Procedural shop tasks: the shop domain's own task generator and its fixed splits.

36 hand-written tasks are too few to learn tool use from (a model memorises them at best), so the warm start
(``sft``), the RL training tasks (``train``), the held-out validation tasks (``eval``) and a larger held-out
``test`` set (for paired comparisons that 24 tasks cannot resolve) are drawn from one generator with disjoint
seeds; the hand-written ``tasks.json`` stays the out-of-distribution check. The
domain declares ``split`` as its ``task_splits`` (``tools.json``), so ``seal-train`` and the envs find them.

Each task is a random store state (catalogue, customer, cart, past orders; built with the helpers of
``tool_specs/shop/make_tasks.py``) and 2-3 user turns, each one *skill* (look up a product, add to the cart,
view the cart, check out, order status, cancel, return, store credit, coupon, address change) phrased from a
few templates. Ground truth is executed against ``ShopAPI`` while the task is built, so every call is valid in
its state and every ``required_response`` is a value from that turn's tool output. ``miss_param`` tasks
withhold a required argument in one turn (the user supplies it next turn); ``miss_func`` tasks withhold the
turn's tool (the agent must abstain; the next turn adds it), mirroring the bundled categories.

    python tool_specs/shop/synthetic.py --seed 1 --n 400 --out tasks_sft.json
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SHOP = Path(__file__).resolve().parent
if str(SHOP) not in sys.path:
    sys.path.insert(0, str(SHOP))

import make_tasks as mt  # noqa: E402  (the bundled domain's own builders: catalogues, customers, orders)
from shop_api import ShopAPI  # noqa: E402

CUSTOMERS = [mt.ALICE, mt.BEN, mt.DEV, mt.EMMA]
REASONS = {"changed_mind": "I changed my mind", "found_cheaper": "I found it cheaper elsewhere",
           "ordered_by_mistake": "I ordered it by mistake", "shipping_too_slow": "the shipping is too slow"}
PAYMENTS = {"credit_card": "my credit card", "paypal": "PayPal"}
ADDRESSES = [("48 Elm Street", "Portland", "97205", "US"), ("9 Harbor Road", "Boston", "02110", "US"),
             ("77 Pine Avenue", "Denver", "80202", "US"), ("5 Lake Drive", "Madison", "53703", "US"),
             ("19 Rue Cler", "Paris", "75007", "FR"), ("Kungsgatan 5", "Gothenburg", "41119", "SE"),
             ("221 Baker Street", "London", "NW1 6XE", "GB"), ("8 Willow Way", "Austin", "73301", "US")]


def _value(v: Any) -> str:
    """A required-response string exactly as it appears in the tool's JSON output."""
    return v if isinstance(v, str) else json.dumps(v)


class Builder:
    """A task under construction: the live API (ground truth runs as turns are added) and the turns so far."""

    def __init__(self, rng: random.Random, catalog: str, cust: dict, cart, orders):
        self.rng = rng
        self.initial = mt.state(catalog, cust, cart=cart, orders=orders)
        self.api = ShopAPI()
        self.api._load_scenario(copy.deepcopy(self.initial[mt.CLASS]))
        self.turns: list[dict[str, Any]] = []

    def run(self, name: str, **arguments) -> dict[str, Any]:
        return getattr(self.api, name)(**arguments)

    def say(self, *templates: str, **fields) -> str:
        return self.rng.choice(templates).format(**fields)


# (builder, mode) -> the turn, or None when the state does not allow it; mode "ask" withholds an argument
Skill = Callable[[Builder, str], "dict[str, Any] | None"]


def _in_stock(b: Builder) -> list[dict]:
    held = {l["product_id"]: l["quantity"] for l in b.api.cart}
    return [p for p in b.api.products.values() if p["stock"] - held.get(p["product_id"], 0) > 0]


def product_info(b: Builder, mode: str):
    p = b.rng.choice(list(b.api.products.values()))
    out = b.run("get_product", product_id=p["product_id"])
    user = b.say("How much is {pid}?", "What does product {pid} cost?", "Tell me the price of {pid}.", pid=p["product_id"])
    return mt.turn(user, mt.call("get_product", product_id=p["product_id"]), rr=[_value(out["price"])])


def add_item(b: Builder, mode: str):
    choices = _in_stock(b)
    if not choices:
        return None
    p = b.rng.choice(choices)
    held = next((l["quantity"] for l in b.api.cart if l["product_id"] == p["product_id"]), 0)
    n = b.rng.randint(1, min(3, p["stock"] - held))
    b.run("add_to_cart", product_id=p["product_id"], quantity=n)
    user = b.say("Add {n} of {name} ({pid}) to my cart.", "Please put {n} x {pid} in my cart.",
                 "I'd like {n} of product {pid} in the cart.", n=n, name=p["name"], pid=p["product_id"])
    return mt.turn(user, mt.call("add_to_cart", product_id=p["product_id"], quantity=n))


def view_cart(b: Builder, mode: str):
    if not b.api.cart:
        return None
    out = b.run("view_cart")
    user = b.say("What's my cart subtotal?", "How much is in my cart right now?", "Show me my cart total.")
    return mt.turn(user, mt.call("view_cart"), rr=[_value(out["subtotal"])])


def checkout(b: Builder, mode: str):
    if not b.api.cart or not b.api.customer.get("shipping_address"):
        return None
    speed = b.rng.choice(["standard", "express", "overnight"])
    pay = b.rng.choice(list(PAYMENTS))
    out = b.run("checkout", shipping_speed=speed, payment_method=pay)
    gt = mt.call("checkout", shipping_speed=speed, payment_method=pay)
    if mode == "ask":  # the speed is withheld, then supplied
        ask = b.say("Please check out my cart, I'll pay with {pay}.", "Place my order and charge {pay}.",
                    pay=PAYMENTS[pay])
        b.turns.append(mt.turn(ask))
        return mt.turn(b.say("{s} shipping, please.", "Use {s} shipping.", s=speed.capitalize()), gt,
                       rr=[out["order_id"]])
    user = b.say("Check out with {s} shipping and pay with {pay}.", "Place the order: {s} shipping, {pay}.",
                 s=speed, pay=PAYMENTS[pay])
    return mt.turn(user, gt, rr=[out["order_id"]])


def order_status(b: Builder, mode: str):
    if not b.api.orders:
        return None
    oid = b.rng.choice(sorted(b.api.orders))
    out = b.run("get_order", order_id=oid)
    user = b.say("What's the status of order {oid}?", "Where is my order {oid}?", "Is {oid} shipped yet?", oid=oid)
    return mt.turn(user, mt.call("get_order", order_id=oid), rr=[out["status"]])


def cancel(b: Builder, mode: str):
    open_ = sorted(o for o, d in b.api.orders.items() if d["status"] == "processing")
    if not open_:
        return None
    oid, reason = b.rng.choice(open_), b.rng.choice(list(REASONS))
    out = b.run("cancel_order", order_id=oid, reason=reason)
    gt = mt.call("cancel_order", order_id=oid, reason=reason)
    if mode == "ask":  # the reason is withheld, then supplied
        b.turns.append(mt.turn(b.say("Cancel order {oid}.", "Please cancel {oid}.", oid=oid)))
        return mt.turn(b.say("The reason: {r}.", "Well, {r}.", r=REASONS[reason]), gt, rr=[_value(out["refunded"])])
    user = b.say("Cancel order {oid}, {r}.", "Please cancel {oid} because {r}.", oid=oid, r=REASONS[reason])
    return mt.turn(user, gt, rr=[_value(out["refunded"])])


def return_item(b: Builder, mode: str):
    lines = [(o, i) for o, d in sorted(b.api.orders.items()) if d["status"] == "delivered"
             for i in d["items"] if not i["returned"]]
    if not lines:
        return None
    oid, item = b.rng.choice(lines)
    out = b.run("return_item", order_id=oid, product_id=item["product_id"])
    user = b.say("Return {pid} from order {oid}.", "I want to return the {name} ({pid}) from {oid}.",
                 oid=oid, pid=item["product_id"], name=item["name"])
    return mt.turn(user, mt.call("return_item", order_id=oid, product_id=item["product_id"]),
                   rr=[_value(out["refunded"])])


def store_credit(b: Builder, mode: str):
    out = b.run("get_account")
    user = b.say("How much store credit do I have?", "What's my store credit balance?")
    return mt.turn(user, mt.call("get_account"), rr=[_value(out["store_credit"])])


def coupon(b: Builder, mode: str):
    if not b.api.cart or b.api.applied_coupon:
        return None
    code = b.rng.choice(["SAVE10", "BOOKS20", "WELCOME15", "TAKE5"])
    try:
        out = b.run("apply_coupon", code=code)
    except ValueError:
        return None
    user = b.say("Apply the coupon {c}.", "I have the code {c}, use it please.", c=code)
    return mt.turn(user, mt.call("apply_coupon", code=code), rr=[_value(out["total_before_shipping"])])


def address(b: Builder, mode: str):
    street, city, zip_code, country = b.rng.choice(ADDRESSES)
    b.run("update_shipping_address", street=street, city=city, zip_code=zip_code, country=country)
    user = b.say("My new address is {st}, {c}, {z}, {co}.", "Ship to {st}, {c}, {z}, {co} from now on.",
                 st=street, c=city, z=zip_code, co=country)
    return mt.turn(user, mt.call("update_shipping_address", street=street, city=city, zip_code=zip_code,
                                 country=country))


SKILLS: dict[str, Skill] = {"get_product": product_info, "add_to_cart": add_item, "view_cart": view_cart,
                            "checkout": checkout, "get_order": order_status, "cancel_order": cancel,
                            "return_item": return_item, "get_account": store_credit, "apply_coupon": coupon,
                            "update_shipping_address": address}
ASKABLE = ("checkout", "cancel_order")  # skills with a withheld-argument (miss_param) phrasing
ENABLE_TEXT = "That function is available again now, please go ahead."


def _random_state(rng: random.Random) -> tuple[str, dict, list, list]:
    catalog = rng.choice(list(mt.CATALOGS))
    products = [p for p in mt.CATALOGS[catalog] if p["stock"] > 0]
    cart = [(p["product_id"], 1) for p in rng.sample(products, rng.randint(0, 2))]
    orders = []
    for k in range(rng.randint(0, 2)):
        items = [(p["product_id"], rng.randint(1, 2)) for p in rng.sample(mt.CATALOGS[catalog], rng.randint(1, 2))]
        oid = f"ORD-{rng.randint(1100, 1999)}"
        if oid not in dict(orders):
            orders.append(mt.order(oid, items, rng.choice(["processing", "shipped", "delivered"])))
    return catalog, copy.deepcopy(rng.choice(CUSTOMERS)), cart, orders


def make_task(rng: random.Random, tid: str, category: str) -> dict[str, Any] | None:
    b = Builder(rng, *_random_state(rng))
    names = list(SKILLS)
    rng.shuffle(names)
    # the category's special turn (withheld argument / withheld tool) goes to the first skill that allows it
    special = {"miss_param": next((n for n in names if n in ASKABLE), None), "miss_func": names[0]}.get(category)
    withheld = None
    for name in names:
        if len(b.turns) >= rng.randint(2, 3):
            break
        mode = {"miss_param": "ask", "miss_func": "withhold"}[category] if name == special else ""
        snapshot = copy.deepcopy(b.api.__dict__)
        turn = SKILLS[name](b, mode)
        if turn is None:
            b.api.__dict__.update(snapshot)
            continue
        if mode == "withhold":
            withheld = name
            b.turns.append(mt.turn(turn["user"], abstain=True))
            turn = {**turn, "user": turn["user"] + " " + ENABLE_TEXT, "add_tools": [name]}
        b.turns.append(turn)
    complete = {"base": True, "miss_param": any(not t["ground_truth"] for t in b.turns),
                "miss_func": withheld is not None}[category]
    if len(b.turns) < 2 or not complete:
        return None
    doc = mt.task(tid, category, b.initial, b.turns, without=withheld)
    mt.verify([doc])
    return doc


def generate(n: int, seed: int, prefix: str, mix=(("base", 0.6), ("miss_param", 0.2), ("miss_func", 0.2)),
             exclude: set[str] | None = None) -> list[dict[str, Any]]:
    """``n`` tasks (ids ``<prefix>_<category>_<k>``); ``exclude`` drops tasks whose turns equal another set's."""
    rng = random.Random(seed)
    out, seen = [], set(exclude or ())
    counts = {c: 0 for c, _ in mix}
    while len(out) < n:
        category = rng.choices([c for c, _ in mix], [w for _, w in mix])[0]
        doc = make_task(rng, f"{prefix}_{category}_{counts[category]:04d}", category)
        if doc is None:
            continue
        key = fingerprint(doc)
        if key in seen:
            continue
        seen.add(key)
        counts[category] += 1
        out.append(doc)
    return out


def fingerprint(doc: dict[str, Any]) -> str:
    """Identity of a task's content (state + turns), to keep train and held-out sets disjoint."""
    return json.dumps([doc["initial_state"], doc["turns"], doc.get("tools")], sort_keys=True)


# split -> (seed, size); generated in this order, each set excluding the tasks of the sets before it
SPLITS: dict[str, tuple[int, int]] = {"eval": (3, 24), "train": (2, 32), "sft": (1, 400), "test": (4, 72)}


@functools.cache
def split_documents(split: str) -> tuple[dict[str, Any], ...]:
    """The task documents of a fixed split (``eval``, ``train``, ``sft``, ``test``): deterministic and disjoint."""
    if split not in SPLITS:
        raise ValueError(f"the shop domain's splits are {', '.join(SPLITS)}, not {split!r}")
    seen: set[str] = set()
    for name, (seed, size) in SPLITS.items():
        docs = generate(size, seed, prefix="heldout" if name == "eval" else name, exclude=seen)
        if name == split:
            return tuple(docs)
        seen |= {fingerprint(d) for d in docs}
    raise AssertionError(split)


def split(split: str) -> tuple:
    """``task_splits`` entry point of the shop domain: the ``Task`` objects of a fixed split."""
    from seal_envs.task import task_from_json

    return tuple(task_from_json(d, "shop") for d in split_documents(split))


def write_tasks(tasks: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"domain": "shop", "tasks": tasks}, indent=1) + "\n")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix", default="syn")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    tasks = generate(args.n, args.seed, args.prefix)
    print(f"wrote {len(tasks)} tasks to {write_tasks(tasks, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
