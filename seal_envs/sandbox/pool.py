"""A process-wide pool of warm sandboxes, so ``reset()`` never waits for a container start."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

from seal_envs.sandbox.base import Sandbox, SandboxConfig


class SandboxPool:
    """Thread-safe pool: ``acquire`` hands out a ready sandbox, ``release`` returns it for reuse,
    ``discard`` destroys a broken one. Idle sandboxes beyond ``config.pool_size`` are closed."""

    def __init__(self, factory: Callable[[], Sandbox], config: SandboxConfig):
        self._factory = factory
        self.config = config
        self._idle: list[Sandbox] = []
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self) -> Sandbox:
        with self._lock:
            if self._closed:
                raise RuntimeError("the sandbox pool is closed")
            while self._idle:
                sandbox = self._idle.pop()
                if sandbox.alive:
                    return sandbox
                sandbox.close()
        return self._factory()

    def release(self, sandbox: Sandbox) -> None:
        with self._lock:
            if not self._closed and sandbox.alive and len(self._idle) < self.config.pool_size:
                self._idle.append(sandbox)
                return
        sandbox.close()

    def discard(self, sandbox: Sandbox) -> None:
        sandbox.close()

    def close(self) -> None:
        with self._lock:
            self._closed, idle, self._idle = True, self._idle, []
        for sandbox in idle:
            sandbox.close()


_pools: dict[SandboxConfig, SandboxPool] = {}
_pools_lock = threading.Lock()


def _factory(config: SandboxConfig) -> Callable[[], Sandbox]:
    if config.backend == "inprocess":
        from seal_envs.sandbox.inprocess import InProcessSandbox

        return lambda: InProcessSandbox(config)
    if config.backend == "docker":
        from seal_envs.sandbox.docker import DockerSandbox

        return lambda: DockerSandbox(config)
    raise ValueError(f"unknown sandbox backend {config.backend!r}; use 'docker' or 'inprocess'")


def get_pool(config: SandboxConfig) -> SandboxPool:
    """The process's pool for this configuration (one per Ray worker process, created lazily)."""
    with _pools_lock:
        pool = _pools.get(config)
        if pool is None:
            pool = _pools[config] = SandboxPool(_factory(config), config)
        return pool


@atexit.register
def close_all_pools() -> None:
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
