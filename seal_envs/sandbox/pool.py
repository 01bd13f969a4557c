"""A process-wide pool of warm sandboxes, so ``reset()`` never waits for a container start."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from seal_envs.sandbox.base import CallResult, Sandbox, SandboxConfig

log = logging.getLogger(__name__)
CLOSE_JOIN_S = 30.0  # how long close() waits for a container start in flight (so it cannot leak)
MAX_BACKOFF_S = 5.0


class SandboxPool:
    """Thread-safe pool: ``acquire`` hands out a ready sandbox, ``release`` returns it for reuse,
    ``discard`` destroys a broken one. A background thread keeps ``config.pool_size`` sandboxes started
    ahead of demand; idle ones beyond that are closed. ``close`` closes every sandbox the pool made,
    handed out or not, so nothing outlives the pool.

    A sandbox handed out by ``acquire`` may run an agent's calls and stays marked so; ``pristine`` hands out
    only sandboxes that never did, for ground-truth replays whose result is cached and trusted."""

    def __init__(self, factory: Callable[[], Sandbox], config: SandboxConfig,
                 on_start: Callable[[], object] | None = None, prestart: bool = True):
        self._factory = factory
        self.config = config
        self._idle: list[Sandbox] = []
        self._leased: weakref.WeakSet[Sandbox] = weakref.WeakSet()
        self._agent_ran: weakref.WeakSet[Sandbox] = weakref.WeakSet()  # handed out for episodes
        self._cond = threading.Condition()
        self._closed = False
        self._handing_out = 0  # acquire() calls between taking or starting a sandbox and leasing it
        self._refiller: threading.Thread | None = None
        if on_start is not None or (prestart and config.pool_size > 0):
            self._refiller = threading.Thread(target=self._refill, args=(on_start, prestart),
                                              name="seal-sandbox-pool", daemon=True)
            self._refiller.start()

    def _refill(self, on_start: Callable[[], object] | None, prestart: bool) -> None:
        """Run ``on_start`` (the reaper), then keep the idle list topped up; back off while starts fail."""
        if on_start is not None:
            try:
                on_start()
            except Exception as exc:  # a reaper failure must not stop the pool
                log.warning("sandbox pool start hook failed: %s", exc)
        backoff = 0.1
        while prestart:
            with self._cond:
                while not self._closed and len(self._idle) >= self.config.pool_size:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                sandbox = self._factory()
            except Exception as exc:
                log.warning("could not prestart a sandbox (retrying in %.1f s): %s", backoff, exc)
                with self._cond:
                    self._cond.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            backoff = 0.1
            with self._cond:
                if not self._closed:
                    self._idle.append(sandbox)
                    self._cond.notify_all()
                    continue
            sandbox.close()
            return

    def acquire(self, for_agent: bool = True) -> Sandbox:
        """A live sandbox: a warm one if any is ready, else one started now. ``for_agent=False``: only one in
        which no agent ever ran a call (see ``pristine``)."""
        stale: list[Sandbox] = []
        sandbox: Sandbox | None = None
        with self._cond:
            if self._closed:
                raise RuntimeError("the sandbox pool is closed")
            for candidate in reversed(self._idle):
                if not candidate.alive:
                    stale.append(candidate)
                elif sandbox is None and (for_agent or candidate not in self._agent_ran):
                    sandbox = candidate
            self._idle = [s for s in self._idle if s is not sandbox and s not in stale]
            self._handing_out += 1
            self._cond.notify_all()  # wake the refiller
        try:
            for dead in stale:
                dead.close()
            if sandbox is None:
                sandbox = self._factory()
            with self._cond:
                if not self._closed:
                    self._leased.add(sandbox)
                    if for_agent:
                        self._agent_ran.add(sandbox)
                    return sandbox
            sandbox.close()  # the pool closed meanwhile: close() waits for this
            raise RuntimeError("the sandbox pool is closed")
        finally:
            with self._cond:
                self._handing_out -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def pristine(self) -> Iterator[Sandbox]:
        """A sandbox for a ground-truth replay, acquired on first use (a cached replay needs none) from the
        sandboxes no agent ever ran a call in: whatever an agent's code did to its sandbox, it cannot reach a
        reference. Released (or discarded when dead) on exit."""
        lazy = _LazySandbox(lambda: self.acquire(for_agent=False))
        try:
            yield lazy
        finally:
            if lazy.acquired is not None:
                (self.release if lazy.acquired.alive else self.discard)(lazy.acquired)

    def release(self, sandbox: Sandbox) -> None:
        """Return a sandbox after its episode; it is reused when alive and the pool is not full."""
        with self._cond:
            self._leased.discard(sandbox)
            if not self._closed and sandbox.alive and len(self._idle) < self.config.pool_size:
                self._idle.append(sandbox)
                return
        sandbox.close()

    def discard(self, sandbox: Sandbox) -> None:
        """Destroy a broken sandbox; the refiller starts a replacement."""
        with self._cond:
            self._leased.discard(sandbox)
            self._cond.notify_all()
        sandbox.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def idle_count(self) -> int:
        with self._cond:
            return len(self._idle)

    def close(self) -> None:
        """Close every sandbox of this pool, idle and handed out, and wait for the starts in flight (the
        refiller's and ``acquire``'s, each closed as it ends): once this returns the pool holds no sandbox and
        starts none, so a folder its containers bind can be deleted. Idempotent."""
        with self._cond:
            self._closed = True
            sandboxes = [*self._idle, *self._leased]
            self._idle, self._leased = [], weakref.WeakSet()
            self._cond.notify_all()
        if self._refiller is not None and self._refiller is not threading.current_thread():
            self._refiller.join(CLOSE_JOIN_S)
        with self._cond:
            self._cond.wait_for(lambda: self._handing_out == 0, CLOSE_JOIN_S)
        _close_many(sandboxes)


class _LazySandbox(Sandbox):
    """A sandbox acquired on first use."""

    def __init__(self, acquire: Callable[[], Sandbox]):
        self._acquire = acquire
        self.acquired: Sandbox | None = None

    def _box(self) -> Sandbox:
        if self.acquired is None:
            self.acquired = self._acquire()
        return self.acquired

    def reset(self, classes: dict[str, Any], python_paths: Any = (), code: str = "") -> None:
        self._box().reset(classes, python_paths, code)

    def resolve(self, targets: list[str], python_paths: Any = (), code: str = "") -> dict[str, str]:
        return self._box().resolve(targets, python_paths, code)

    def call(self, target: str, arguments: dict[str, Any], timeout_s: float | None = None) -> CallResult:
        return self._box().call(target, arguments, timeout_s)

    def snapshot(self) -> dict[str, Any]:
        return self._box().snapshot()

    def close(self) -> None:
        if self.acquired is not None:
            self.acquired.close()

    @property
    def alive(self) -> bool:
        return self.acquired is None or self.acquired.alive


def _close_many(sandboxes: list[Sandbox]) -> None:
    """Close in parallel: removing a container takes tens of milliseconds."""
    threads = [threading.Thread(target=s.close, daemon=True) for s in sandboxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(CLOSE_JOIN_S)


_pools: dict[SandboxConfig, SandboxPool] = {}
_pools_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child starts with no pools: the parent's sandboxes are the parent's to use and close."""
    global _pools_lock
    _pools_lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _make_pool(config: SandboxConfig) -> SandboxPool:
    if config.backend == "inprocess":
        from seal_envs.sandbox.inprocess import InProcessSandbox

        return SandboxPool(lambda: InProcessSandbox(config), config, prestart=False)
    if config.backend == "docker":
        from seal_envs.sandbox.docker import DockerSandbox, before_sweep, docker_client
        from seal_envs.sandbox.reaper import reap

        client = docker_client(config.daemon_timeout_s)  # fail here, with advice, when the daemon is unreachable
        before_sweep(close_all_pools)
        return SandboxPool(lambda: DockerSandbox(config), config, on_start=lambda: reap(client))
    raise ValueError(f"unknown sandbox backend {config.backend!r}; use 'docker' or 'inprocess'")


def get_pool(config: SandboxConfig) -> SandboxPool:
    """The process's pool for this configuration (one per Ray worker process, created lazily)."""
    with _pools_lock:
        pool = _pools.get(config)
        if pool is None or pool.closed:
            pool = _pools[config] = _make_pool(config)
        return pool


@atexit.register
def close_all_pools() -> None:
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
