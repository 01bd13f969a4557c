"""Per-process pools of SEAL envs for the agent loop, and the interface board of the closed loop.

Each verl agent-loop worker (a Ray actor running many agent-loop coroutines) keeps one ``EnvPool`` per env
spec (domain, mode, sandbox, step cap). An episode takes an idle env (or makes one, up to ``max_size``),
runs, and gives it back; envs are expensive to build (spec loading, reference replays cached per env) but
cheap to reset. Sandboxes themselves are pooled one level below by ``seal_envs.sandbox.get_pool``.

The closed loop: the trainer publishes the evolved ``InterfaceState`` (as JSON, with a version) to the
``InterfaceBoard``, a small named Ray actor. Before each training episode the agent loop compares the
board's version with the one its pool applied and, if newer, ``mutate``s every idle training env of the
pool to adopt it (``env.unwrapped.mutate(InterfaceState)``). Evaluation envs (``mode="eval"``) are never
touched: validation always sees the original interface. Outside Ray (unit tests) a process-local board
is used.

The board also collects every finished *training* episode's outcome (``post_rollout``: task id, turn labels and
tags, reward, infrastructure flag), which the trainer's closed loop drains once per step (``drain_rollouts``).
This is how the failure profile sees every rollout, including those of groups that verl's dynamic sampling
(``algorithm.filter_groups``) discards before the advantage step.

Scaling knobs:

- ``seal.env_pool_size`` (``SEAL_ENV_POOL_SIZE``): max envs per pool per agent-loop worker; an episode
  waits for an env when all are busy. It bounds the concurrent episodes (and so sandboxes) per worker;
  ``rollout.agent.num_workers`` x this is the per-job concurrency.
- sandboxes per node: every env holds at most one sandbox while an episode runs, so concurrent sandboxes
  on a node = workers on that node x ``env_pool_size``; the Docker backend's own warm pool size is set in
  ``SandboxConfig`` (see ``seal_envs.sandbox``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from seal_envs.formats import DEFAULT_TOOL_FORMAT

logger = logging.getLogger(__name__)

BOARD_NAME = "seal_interface_board"
DEFAULT_POOL_SIZE = int(os.environ.get("SEAL_ENV_POOL_SIZE", "64"))


@dataclass(frozen=True)
class EnvSpec:
    """What distinguishes one pool of envs from another."""

    domain: str = "shop"
    mode: str = "train"
    sandbox: str = "inprocess"
    max_steps_per_turn: int = 20
    tasks: str | None = None  # a tasks.json path; None: the domain's own tasks
    env_id: str = "seal/ToolUse-v0"
    tool_format: str = DEFAULT_TOOL_FORMAT  # seal.tool_format (seal_envs.formats)

    def make(self):
        import gymnasium as gym

        import seal_envs  # noqa: F401  (registers the env ids)

        kwargs: dict[str, Any] = dict(domain=self.domain, mode=self.mode, sandbox=self.sandbox,
                                      max_steps_per_turn=self.max_steps_per_turn, tool_format=self.tool_format)
        if self.tasks:
            kwargs["tasks"] = self.tasks
        if self.env_id != "seal/ToolUse-v0":
            kwargs.pop("domain")
        if self.env_id == "seal/BFCL-v3-MultiTurn-v0":
            kwargs["split"] = "all"  # rows name train and eval task ids; the dataset decides the split
        return gym.make(self.env_id, **kwargs)


class EnvPool:
    """Idle envs of one spec; ``acquire``/``release`` from coroutines of one event loop (or threads)."""

    def __init__(self, spec: EnvSpec, max_size: int = DEFAULT_POOL_SIZE):
        self.spec = spec
        self.max_size = max_size
        self._idle: list[Any] = []
        self._size = 0
        self._cond: asyncio.Condition | None = None
        self.interface_version = 0
        self._interface_json: str | None = None
        self.created = 0
        self.discarded = 0

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    def apply_interface(self, interface_json: str | None, version: int) -> bool:
        """Adopt a published interface for every env handed out from now on (training pools only)."""
        if self.spec.mode == "eval" or interface_json is None or version <= self.interface_version:
            return False
        self._interface_json, self.interface_version = interface_json, version
        return True

    def _adopt(self, env) -> None:
        if self.spec.mode == "eval" or self._interface_json is None:
            return
        if getattr(env, "_seal_interface_version", 0) == self.interface_version:
            return
        from seal_envs.interface import InterfaceState

        env.unwrapped.mutate(InterfaceState.from_json(self._interface_json))
        env._seal_interface_version = self.interface_version

    async def acquire(self):
        cond = self._condition()
        async with cond:
            while not self._idle and self._size >= self.max_size:
                await cond.wait()
            env = self._idle.pop() if self._idle else None
            if env is None:
                self._size += 1
        if env is None:
            try:
                env = await asyncio.to_thread(self.spec.make)
                self.created += 1
            except BaseException:
                async with cond:
                    self._size -= 1
                    cond.notify()
                raise
        self._adopt(env)
        return env

    async def release(self, env, broken: bool = False) -> None:
        cond = self._condition()
        if broken:
            self.discarded += 1
            try:
                await asyncio.to_thread(env.close)
            except Exception:  # a broken env may fail to close; it is dropped either way
                logger.debug("closing a broken env failed", exc_info=True)
        async with cond:
            if broken:
                self._size -= 1
            else:
                self._idle.append(env)
            cond.notify()

    def close(self) -> None:
        for env in self._idle:
            try:
                env.close()
            except Exception:
                pass
        self._idle.clear()


_POOLS: dict[EnvSpec, EnvPool] = {}


def get_env_pool(spec: EnvSpec, max_size: int | None = None) -> EnvPool:
    pool = _POOLS.get(spec)
    if pool is None:
        pool = _POOLS[spec] = EnvPool(spec, max_size or DEFAULT_POOL_SIZE)
    return pool


def all_pools() -> dict[EnvSpec, EnvPool]:
    return _POOLS


# ----------------------------------------------------------------------------------------- interface board


class InterfaceBoardImpl:
    """Holds the latest training interface (JSON) and its version, and the training episodes finished since
    the last drain; one per training job."""

    def __init__(self):
        self.version = 0
        self.interface_json: str | None = None
        self.history: list[dict[str, Any]] = []
        self.rollouts: list[dict[str, Any]] = []

    def post_rollout(self, record: dict[str, Any]) -> None:
        self.rollouts.append(record)

    def drain_rollouts(self) -> list[dict[str, Any]]:
        drained, self.rollouts = self.rollouts, []
        return drained

    def publish(self, interface_json: str, step: int | None = None) -> int:
        self.version += 1
        self.interface_json = interface_json
        self.history.append({"version": self.version, "step": step, "interface": json.loads(interface_json)})
        return self.version

    def get(self, known_version: int = -1) -> tuple[int, str | None]:
        if known_version >= self.version:
            return self.version, None
        return self.version, self.interface_json

    def get_history(self) -> list[dict[str, Any]]:
        return list(self.history)


_LOCAL_BOARD: InterfaceBoardImpl | None = None
# The creating process (the trainer) keeps its handle: Ray removes an actor, named or not, once no handle to it is
# left, and the agent-loop workers only look it up by name before each episode.
_RAY_BOARD: Any = None


def _ray_ready() -> bool:
    try:
        import ray

        return ray.is_initialized()
    except Exception:
        return False


def get_board(create: bool = False):
    """The job's board: a named Ray actor when Ray runs, else a process-local object. None if absent."""
    global _LOCAL_BOARD, _RAY_BOARD
    if _ray_ready():
        import ray

        if create:
            if _RAY_BOARD is None:
                _RAY_BOARD = ray.remote(InterfaceBoardImpl).options(name=BOARD_NAME, get_if_exists=True,
                                                                    num_cpus=0).remote()
            return _RAY_BOARD
        try:
            return ray.get_actor(BOARD_NAME)
        except ValueError:
            return None
    if _LOCAL_BOARD is None and create:
        _LOCAL_BOARD = InterfaceBoardImpl()
    return _LOCAL_BOARD


async def board_get(board, known_version: int) -> tuple[int, str | None]:
    if board is None:
        return known_version, None
    if isinstance(board, InterfaceBoardImpl):
        return board.get(known_version)
    return await board.get.remote(known_version)


async def board_post_rollout(board, record: dict[str, Any]) -> None:
    if board is None:
        return
    if isinstance(board, InterfaceBoardImpl):
        board.post_rollout(record)
    else:
        await board.post_rollout.remote(record)


def board_drain_rollouts(board) -> list[dict[str, Any]]:
    """Every training episode posted since the last drain (``[]`` without a board)."""
    if board is None:
        return []
    if isinstance(board, InterfaceBoardImpl):
        return board.drain_rollouts()
    import ray

    return list(ray.get(board.drain_rollouts.remote()))


def reset_local_state() -> None:
    """Forget pools and the boards (tests)."""
    global _LOCAL_BOARD, _RAY_BOARD
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()
    _LOCAL_BOARD = _RAY_BOARD = None


__all__ = ["BOARD_NAME", "EnvPool", "EnvSpec", "InterfaceBoardImpl", "board_drain_rollouts", "board_post_rollout",
           "get_board", "get_env_pool"]
