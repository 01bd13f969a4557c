"""The in-process debugging backend: same tool server code as Docker, no isolation, no container."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from seal_envs.sandbox import CallResult, SandboxConfig, get_pool
from seal_envs.sandbox.pool import SandboxPool
from seal_envs.sandbox.inprocess import InProcessSandbox

PATHS = [str(Path(__file__).parent / "fixtures" / "evil")]
EVIL = "evil_tools:EvilTools"
CLASSES = {EVIL: {"counter": 5, "notes": ["a"]}}
CONFIG = SandboxConfig(backend="inprocess", max_output_bytes=100, pool_size=2)


@pytest.fixture
def sandbox():
    box = InProcessSandbox(CONFIG)
    box.reset(CLASSES, PATHS)
    yield box
    box.close()


def test_round_trip_and_snapshot(sandbox):
    assert sandbox.call(f"{EVIL}.add", {"amount": 2}) == CallResult(ok=True, output={"counter": 7})
    assert sandbox.snapshot() == {EVIL: {"counter": 7, "notes": ["a"]}}
    sandbox.reset(CLASSES, PATHS)
    assert sandbox.snapshot()[EVIL]["counter"] == 5


def test_state_is_a_private_copy(sandbox):
    classes = {EVIL: {"counter": 1, "notes": ["x"]}}
    sandbox.reset(classes, PATHS)
    sandbox.call(f"{EVIL}.add", {"amount": 1})
    assert classes == {EVIL: {"counter": 1, "notes": ["x"]}}


def test_tool_exception_is_an_error_result(sandbox):
    result = sandbox.call(f"{EVIL}.fail", {"message": "boom"})
    assert (result.ok, result.error_type, result.error, result.infrastructure) == (False, "RuntimeError", "boom", False)
    assert "RuntimeError: boom" in result.render()
    assert sandbox.call("evil_tools:Missing.x", {}).error_type == "LookupError"
    assert sandbox.call(f"{EVIL}.add", {"wrong": 1}).error_type == "TypeError"


def test_output_cap(sandbox):
    result = sandbox.call(f"{EVIL}.big_output", {"size": 1000})
    assert len(result.output["truncated_output"]) == 100 and "truncated" in result.output["note"]


def test_unloadable_state_is_a_value_error(sandbox):
    with pytest.raises(ValueError, match="cannot load the task state"):
        sandbox.reset({"no_such_module:X": None}, PATHS)


def test_pool_reuses_and_is_thread_safe():
    pool = get_pool(CONFIG)
    box = pool.acquire()
    pool.release(box)
    assert pool.acquire() is box
    pool.release(box)
    errors: list[BaseException] = []

    def episode(i: int) -> None:
        try:
            sandbox = pool.acquire()
            sandbox.reset({EVIL: {"counter": i}}, PATHS)
            for _ in range(20):
                sandbox.call(f"{EVIL}.add", {"amount": 1})
            assert sandbox.snapshot()[EVIL]["counter"] == i + 20
            pool.release(sandbox)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert 1 <= pool.idle_count <= CONFIG.pool_size  # reused, never more kept than pool_size
    pool.close()
    assert get_pool(CONFIG) is not pool  # a closed pool is replaced, not handed out
    get_pool(CONFIG).close()


class _SlowStart:
    """A factory whose starts wait for ``go``, logging what happens: a container start caught by ``close``."""

    def __init__(self) -> None:
        self.go, self.started, self.events = threading.Event(), threading.Event(), []

    def __call__(self) -> InProcessSandbox:
        self.started.set()
        assert self.go.wait(10), "the test never let the start finish"
        self.events.append("started")
        box = InProcessSandbox(CONFIG)
        close = box.close
        box.close = lambda: (self.events.append("closed"), close())  # type: ignore[method-assign]
        return box


@pytest.mark.parametrize("starter", ["refiller", "acquire"])
def test_a_closed_pool_starts_nothing_and_close_waits_for_starts_in_flight(starter):
    """Issue 24 item 4: a start in flight when the pool closes (the refiller's or an ``acquire``'s) is closed before
    ``close()`` returns, and nothing starts after, so a caller may delete the folders its containers bind."""
    factory = _SlowStart()
    pool = SandboxPool(factory, CONFIG, prestart=starter == "refiller")
    errors: list[BaseException] = []
    if starter == "acquire":
        def take() -> None:
            try:
                pool.acquire()
            except RuntimeError as exc:
                errors.append(exc)
        threading.Thread(target=take).start()
    assert factory.started.wait(10)
    closer = threading.Thread(target=lambda: (pool.close(), factory.events.append("close returned")))
    closer.start()
    closer.join(0.5)  # without the wait, close() has returned by now
    factory.go.set()
    closer.join(10)
    assert factory.events == ["started", "closed", "close returned"]
    if starter == "acquire":
        assert "the sandbox pool is closed" in str(errors[0])
    with pytest.raises(RuntimeError, match="the sandbox pool is closed"):
        pool.acquire()
    assert factory.events == ["started", "closed", "close returned"]  # nothing started since
