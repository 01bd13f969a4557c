"""What every sandbox backend provides: load an episode's state, execute calls, snapshot state."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Literal


class SandboxError(RuntimeError):
    """The sandbox itself failed (dead container, protocol break): an infrastructure fault, not the agent's."""


@dataclass(frozen=True)
class CallResult:
    """The outcome of one tool call.

    ``infrastructure`` marks failures of ours (the sandbox died, our timeout fired on a dead server):
    such turns are masked out of training, never diagnosed as the agent's mistake. A tool that raises,
    hangs past its timeout or exhausts its limits is the tool's failure and comes back as an error.
    ``text`` is the return value in Python's words (the tool server's ``result_text``), for benchmarks that
    show and compare outputs that way.
    """

    ok: bool
    output: Any = None
    error_type: str | None = None
    error: str | None = None
    infrastructure: bool = False
    text: str | None = field(default=None, compare=False)

    def render(self) -> str:
        """The text the policy sees as the tool message."""
        import json

        if self.ok:
            return self.output if isinstance(self.output, str) else json.dumps(self.output)
        return json.dumps({"error": f"{self.error_type}: {self.error}"})


@dataclass(frozen=True)
class SandboxConfig:
    """How sandboxes are made. ``backend="inprocess"`` is for debugging only: no isolation, no limits."""

    backend: Literal["docker", "inprocess"] = "docker"
    image: str | None = None  # None: the SEAL tool image, built on first use
    mem_limit: str = "256m"
    pids_limit: int = 64
    tmpfs_size: str = "16m"
    call_timeout_s: float = 10.0
    max_output_bytes: int = 1 << 16
    pool_size: int = 4  # warm sandboxes kept ready per process


class Sandbox(abc.ABC):
    """One isolated tool server, reused across episodes (``reset`` loads a fresh state)."""

    @abc.abstractmethod
    def reset(self, classes: dict[str, Any], python_paths: list[str] | tuple[str, ...] = ()) -> None:
        """Instantiate each ``package.module:Class`` and load its initial state (None: default state).

        Raises ``SandboxError`` when the sandbox is dead, ``ValueError`` when the state cannot be loaded.
        """

    @abc.abstractmethod
    def call(self, target: str, arguments: dict[str, Any]) -> CallResult:
        """Execute ``package.module:Class.method(**arguments)``; never raises."""

    @abc.abstractmethod
    def snapshot(self) -> dict[str, Any]:
        """Public state of every loaded instance, as JSON. Raises ``SandboxError`` when dead."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release resources (remove the container). Idempotent."""

    @property
    def alive(self) -> bool:
        return True
