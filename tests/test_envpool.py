"""The agent loop's env pools and the interface board's bookkeeping (real envs, tools in-process)."""

from __future__ import annotations

import asyncio

import pytest

from seal_envs.interface import InterfaceState
from seal_envs.spec import SpecError
from seal_trainer.envpool import (
    EnvPool, EnvSpec, InterfaceBoardImpl, board_get, get_board, get_env_pool, reset_local_state,
)

SHOP = EnvSpec(domain="shop", mode="train", sandbox="inprocess")


@pytest.fixture(autouse=True)
def fresh_pools_and_board():
    reset_local_state()
    yield
    reset_local_state()


def test_a_spec_makes_the_env_it_describes():
    env = EnvSpec(domain="shop", mode="eval", sandbox="inprocess", max_steps_per_turn=3, tool_format="mistral").make()
    try:
        inner = env.unwrapped
        assert (inner.mode, inner.sandbox_config.backend, inner.max_steps_per_turn, inner.tool_format.name) == (
            "eval", "inprocess", 3, "mistral")
        assert {t.domain for t in inner.tasks} == {"shop"}
    finally:
        env.close()


def test_a_spec_with_a_tasks_file_makes_envs_of_those_tasks(tmp_path):
    """A curriculum or procedurally generated training set reaches the agent loop's envs through the spec."""
    from seal_envs.spec import load_domain
    from seal_envs.task import load_tasks, write_tasks

    chosen = [t for t in load_tasks(load_domain("shop").root) if t.id == "shop_base_001"]
    env = EnvSpec(domain="shop", sandbox="inprocess", tasks=str(write_tasks(chosen, tmp_path / "tasks.json"))).make()
    try:
        assert [t.id for t in env.unwrapped.tasks] == ["shop_base_001"]
    finally:
        env.close()


def test_a_bfcl_spec_reaches_every_task_of_the_benchmark():
    pytest.importorskip("bfcl_eval")
    env = EnvSpec(mode="eval", sandbox="inprocess", env_id="seal/BFCL-v3-MultiTurn-v0").make()
    try:
        categories = {t.category for t in env.unwrapped.tasks}
        assert len(env.unwrapped.tasks) == 800 and len(categories) == 4  # split="all": the rows pick train or eval
    finally:
        env.close()


def test_a_full_pool_makes_the_next_episode_wait_for_a_released_env():
    pool = EnvPool(SHOP, max_size=1)

    async def scenario():
        first = await pool.acquire()
        waiting = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0.05)
        assert not waiting.done() and pool.created == 1
        await pool.release(first)
        second = await asyncio.wait_for(waiting, 5)
        await pool.release(second)
        return first, second

    first, second = asyncio.run(scenario())
    assert second is first and pool.created == 1


def test_a_broken_env_is_closed_and_its_place_freed():
    pool = EnvPool(SHOP, max_size=1)

    async def scenario():
        env = await pool.acquire()
        env.reset(options={"task_id": "shop_base_001"})  # holds a sandbox now
        await pool.release(env, broken=True)
        replacement = await asyncio.wait_for(pool.acquire(), 30)  # the freed slot: a new env, no wait
        await pool.release(replacement)
        return env, replacement

    broken, replacement = asyncio.run(scenario())
    assert replacement is not broken and pool.created == 2 and pool.discarded == 1
    assert broken.unwrapped._sandbox is None  # closed: its sandbox went back to the sandbox pool


def test_a_pool_holds_at_most_max_size_envs_with_broken_ones_replaced():
    """A broken env gives back exactly its own place: the pool makes a replacement, and is full again after."""
    pool = EnvPool(SHOP, max_size=2)

    async def scenario():
        first, second = await pool.acquire(), await pool.acquire()
        await pool.release(first, broken=True)
        replacement = await pool.acquire()
        waiting = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0.05)
        assert not waiting.done() and pool.created == 3  # two in use: the pool is full
        await pool.release(second)
        reused = await asyncio.wait_for(waiting, 5)
        return second, replacement, reused

    second, replacement, reused = asyncio.run(scenario())
    assert reused is second and replacement is not second and pool.created == 3 and pool.discarded == 1


def test_an_env_that_cannot_be_made_frees_its_place():
    pool = EnvPool(EnvSpec(domain="no_such_domain", sandbox="inprocess"), max_size=1)

    async def scenario():
        for _ in range(3):  # later attempts do not wait for the failed ones (a wait would time out instead)
            with pytest.raises(SpecError, match="no_such_domain"):
                await asyncio.wait_for(pool.acquire(), 30)

    asyncio.run(scenario())
    assert pool.created == 0 and pool._size == 0


def test_closing_a_pool_closes_its_idle_envs():
    pool = get_env_pool(SHOP, max_size=2)
    assert get_env_pool(SHOP) is pool and pool.max_size == 2

    async def scenario():
        env = await pool.acquire()
        env.reset(options={"task_id": "shop_base_001"})
        await pool.release(env)
        return env

    env = asyncio.run(scenario())
    pool.close()
    assert env.unwrapped._sandbox is None and pool._idle == []


def test_an_eval_pool_never_takes_an_interface():
    pool = EnvPool(EnvSpec(domain="shop", mode="eval", sandbox="inprocess"))
    assert not pool.apply_interface(InterfaceState(schema_cues=True).dumps(), 1) and pool.interface_version == 0


def test_the_board_hands_out_only_what_a_reader_has_not_seen():
    board = InterfaceBoardImpl()
    assert board.get() == (0, None)
    first, second = InterfaceState(schema_cues=True, version=1), InterfaceState(error_hints=True, version=2)
    assert board.publish(first.dumps(), step=1) == 1 and board.publish(second.dumps(), step=2) == 2
    assert board.get(0) == (2, second.dumps()) and board.get(1) == (2, second.dumps())
    assert board.get(2) == (2, None) and board.get(5) == (2, None)
    assert [(h["version"], h["step"], h["interface"]["error_hints"]) for h in board.get_history()] == [
        (1, 1, False), (2, 2, True)]


def test_outside_ray_the_board_is_one_local_object_made_on_demand():
    assert get_board() is None
    assert asyncio.run(board_get(None, 3)) == (3, None)
    board = get_board(create=True)
    assert isinstance(board, InterfaceBoardImpl) and get_board() is board and get_board(create=True) is board
    board.publish(InterfaceState(schema_cues=True).dumps())
    assert asyncio.run(board_get(board, 0))[0] == 1
