"""The bundled "shop" domain: spec and tasks load, ground truth is consistent and replays cleanly."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys

import jsonschema
import pytest

from seal_envs.sandbox.server import ToolServer
from seal_envs.spec import load_domain
from seal_envs.spec.loader import BUNDLED_SPECS
from seal_envs.task import load_tasks

CLASS = "shop_api:ShopAPI"
DOMAIN = load_domain("shop")
sys.path.insert(0, str(DOMAIN.root))  # the implementation lives beside its spec, like any user domain
from shop_api import NotFoundError, ShopAPI  # noqa: E402
TASKS = load_tasks("shop")


def test_domain_loads():
    assert DOMAIN.name == "shop"
    assert len(DOMAIN.tools) >= 10
    for tool in DOMAIN.tools:
        assert tool.class_path == CLASS
        assert callable(getattr(ShopAPI, tool.method))
    read_only = {t.name for t in DOMAIN.tools if not t.mutates_state}
    assert {"search_products", "get_product", "view_cart", "list_orders", "get_order", "get_account"} == read_only


def test_tasks_load_and_categories():
    assert len(TASKS) >= 32
    categories = {t.category for t in TASKS}
    assert categories == {"base", "miss_param", "miss_func"}
    for task in TASKS:
        assert task.domain == "shop"
        assert 2 <= len(task.turns) <= 4
        assert set(task.initial_state) == {CLASS}


def test_tasks_json_is_reproduced_by_generator():
    path = BUNDLED_SPECS / "shop" / "make_tasks.py"
    spec = importlib.util.spec_from_file_location("shop_make_tasks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tasks = module.base_tasks() + module.miss_param_tasks() + module.miss_func_tasks()
    expected = json.dumps({"domain": "shop", "tasks": tasks}, indent=2) + "\n"
    assert (BUNDLED_SPECS / "shop" / "tasks.json").read_text() == expected


def _available_per_turn(task):
    available = set(task.tools) if task.tools is not None else set(DOMAIN.tool_names)
    for turn in task.turns:
        available |= set(turn.add_tools)
        yield turn, set(available)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_ground_truth_calls_are_valid(task):
    if task.tools is not None:
        assert set(task.tools) <= set(DOMAIN.tool_names)
    for turn, available in _available_per_turn(task):
        assert set(turn.add_tools) <= set(DOMAIN.tool_names)
        if turn.expects_abstention:
            assert turn.ground_truth == ()
        for call in turn.ground_truth:
            assert call.name in available, f"{task.id}: {call.name} not offered at this turn"
            jsonschema.validate(call.arguments, DOMAIN.tool(call.name).parameters)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_category_structure(task):
    if task.category == "miss_func":
        missing = set(DOMAIN.tool_names) - set(task.tools)
        assert len(missing) == 1
        turns = task.turns
        k = next(i for i, t in enumerate(turns) if t.expects_abstention)
        assert turns[k].ground_truth == ()
        assert set(turns[k + 1].add_tools) == missing
        assert any(c.name in missing for c in turns[k + 1].ground_truth)
    elif task.category == "miss_param":
        assert task.tools is None
        empty = [i for i, t in enumerate(task.turns) if not t.ground_truth]
        assert len(empty) == 1 and empty[0] + 1 < len(task.turns)
        assert task.turns[empty[0] + 1].ground_truth
    else:
        assert task.tools is None
        assert all(t.ground_truth for t in task.turns)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_ground_truth_replays_through_tool_server(task):
    server = ToolServer()
    server.reset({CLASS: task.initial_state[CLASS]}, [str(DOMAIN.root)])
    before = copy.deepcopy(task.initial_state)
    for turn in task.turns:
        outputs = []
        for call in turn.ground_truth:
            result = server.call(f"{CLASS}.{DOMAIN.tool(call.name).method}", call.arguments)
            outputs.append(json.dumps(result).lower())
        for needle in turn.required_response:
            assert any(needle.lower() in o for o in outputs), f"{task.id}: {needle!r} in no tool output"
    assert task.initial_state == before  # the server copied the state
    snapshot = server.snapshot()[CLASS]
    json.dumps(snapshot)
    assert set(snapshot) == {"customer", "products", "cart", "applied_coupon", "coupons", "orders",
                             "next_order_number"}


def test_read_only_tools_do_not_change_state():
    for task in TASKS:
        server = ToolServer()
        server.reset({CLASS: task.initial_state[CLASS]}, [str(DOMAIN.root)])
        for turn in task.turns:
            for call in turn.ground_truth:
                tool = DOMAIN.tool(call.name)
                before = server.snapshot()
                server.call(f"{CLASS}.{tool.method}", call.arguments)
                if not tool.mutates_state:
                    assert server.snapshot() == before, (task.id, call.name)


# ---------------------------------------------------------------- ShopAPI unit tests

def _api():
    api = ShopAPI()
    api._load_scenario(TASKS[0].initial_state[CLASS])
    return api


def test_default_state_is_empty_and_valid():
    api = ShopAPI()
    assert api.view_cart()["items"] == []
    assert api.list_orders() == {"count": 0, "orders": []}
    assert api.search_products("")["count"] == 0
    with pytest.raises(ValueError, match="cart is empty"):
        api.checkout("standard", "paypal")


def test_load_scenario_deep_copies():
    state = TASKS[0].initial_state[CLASS]
    api = ShopAPI()
    api._load_scenario(state)
    api.add_to_cart("p-101", 1)
    api.products["p-101"]["stock"] = 0
    assert state["cart"] == [] and state["products"]["p-101"]["stock"] == 12


def test_unknown_ids_raise_key_errors_with_clear_messages():
    api = _api()
    with pytest.raises(KeyError) as info:
        api.get_product("p-99")
    assert str(info.value) == "no product with id 'p-99'"
    with pytest.raises(NotFoundError, match="no order with id 'ORD-9'"):
        api.get_order("ORD-9")
    with pytest.raises(NotFoundError, match="not in the cart"):
        api.remove_from_cart("p-101")
    api.add_to_cart("p-101", 1)
    with pytest.raises(NotFoundError, match="no coupon"):
        api.apply_coupon("NOPE")


def test_bad_values_raise_value_errors():
    api = _api()
    with pytest.raises(ValueError, match="quantity must be at least 1"):
        api.add_to_cart("p-101", 0)
    with pytest.raises(ValueError, match="must be an integer"):
        api.add_to_cart("p-101", "2")
    with pytest.raises(ValueError, match="in stock"):
        api.add_to_cart("p-103", 1)
    with pytest.raises(ValueError, match="category must be one of"):
        api.search_products("mug", category="garden")
    api.add_to_cart("p-101", 1)
    with pytest.raises(ValueError, match="shipping_speed must be one of"):
        api.checkout("teleport", "paypal")
    with pytest.raises(ValueError, match="expired"):
        api.apply_coupon("SUMMER30")
    with pytest.raises(ValueError, match="two-letter"):
        api.update_shipping_address("1 Main St", "Springfield", "12345", "USA")


def test_order_lifecycle_rules():
    api = _api()
    api.add_to_cart("p-105", 2)
    order = api.checkout("standard", "credit_card")
    assert order["order_id"] == "ORD-1001" and api.next_order_number == 1002
    assert order["total"] == 30.97 and api.products["p-105"]["stock"] == 38 and api.cart == []
    with pytest.raises(ValueError, match="only delivered orders accept returns"):
        api.return_item("ORD-1001", "p-105")
    with pytest.raises(ValueError, match="reason must be one of"):
        api.cancel_order("ORD-1001", "bored")
    assert api.cancel_order("ORD-1001", "changed_mind")["refunded"] == 30.97
    assert api.products["p-105"]["stock"] == 40
    with pytest.raises(ValueError, match="can no longer be cancelled"):
        api.cancel_order("ORD-1001", "changed_mind")


def test_single_use_coupon_is_consumed():
    api = _api()
    api.coupons["TAKE5"] = {"code": "TAKE5", "amount_off": 5.0, "min_subtotal": 25, "category": None,
                            "single_use": True, "used": False, "active": True}
    api.add_to_cart("p-102", 1)
    assert api.apply_coupon("take5")["discount"] == 5.0
    assert api.checkout("express", "paypal")["total"] == 37.98
    assert api.coupons["TAKE5"]["used"] is True
    api.add_to_cart("p-102", 1)
    with pytest.raises(ValueError, match="already been used"):
        api.apply_coupon("TAKE5")
