"""What every sandbox backend provides: load an episode's state, execute calls, snapshot state."""

from __future__ import annotations

import abc
import json
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
        """The text the policy sees as the tool message (always valid Unicode: tokenizers reject lone
        surrogates, which tools can return)."""
        if self.ok:
            return valid_text(self.output if isinstance(self.output, str) else json.dumps(self.output))
        return valid_text(json.dumps({"error": f"{self.error_type}: {self.error}"}))


def valid_text(text: str) -> str:
    """``text`` with anything that is not encodable Unicode (lone surrogates) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


UNREADABLE_STATE = "__unreadable_state__"


def unreadable_state(reason: str) -> dict[str, Any]:
    """What ``snapshot`` returns when a tool broke its own episode process: no reference state has this key,
    so the turn fails on state (a diagnosed failure, never a masked one)."""
    return {UNREADABLE_STATE: reason}


@dataclass(frozen=True)
class SandboxConfig:
    """How sandboxes are made. ``backend="inprocess"`` is for debugging only: no isolation, no limits.

    ``call_timeout_s`` bounds one tool call (the sandbox enforces it and rebuilds the episode after it);
    ``step_timeout_s`` bounds all the calls of one env step together, whatever hangs (calls past it are not
    run and fail as ``StepTimeout``); ``daemon_timeout_s`` bounds every request to the Docker daemon; ``max_starts`` caps the container starts
    a process has in flight (so that they finish within that deadline); ``cpus`` caps a sandbox's CPU share.
    """

    backend: Literal["docker", "inprocess"] = "docker"
    image: str | None = None  # None: the SEAL tool image, built on first use
    mem_limit: str = "256m"
    pids_limit: int = 64
    tmpfs_size: str = "16m"
    cpus: float = 1.0
    call_timeout_s: float = 10.0
    step_timeout_s: float = 60.0
    daemon_timeout_s: float = 30.0
    max_starts: int = 8
    max_output_bytes: int = 1 << 16
    pool_size: int = 4  # warm sandboxes kept ready per process


class Sandbox(abc.ABC):
    """One isolated tool server, reused across episodes (``reset`` loads a fresh state)."""

    @abc.abstractmethod
    def reset(self, classes: dict[str, Any], python_paths: list[str] | tuple[str, ...] = (), code: str = "") -> None:
        """Start a fresh episode: instantiate each ``package.module:Class`` and load its initial state (None:
        default state). ``code`` identifies the domain's code (``ToolDomain.code_hash``): code that changed is
        imported afresh.

        Raises ``SandboxError`` when the sandbox is dead, ``ValueError`` when the state cannot be loaded.
        """

    @abc.abstractmethod
    def resolve(self, targets: list[str], python_paths: list[str] | tuple[str, ...] = (),
                code: str = "") -> dict[str, str]:
        """Which ``package.module:Class[.method]`` targets do not exist, and why (target -> problem). The
        domain's modules are imported where its tools run (inside the sandbox), never in the host process.
        Ends the running episode. Raises ``SandboxError`` when the sandbox fails, ``ValueError`` when importing
        the domain's code hangs or crashes its process."""

    @abc.abstractmethod
    def call(self, target: str, arguments: dict[str, Any], timeout_s: float | None = None) -> CallResult:
        """Execute ``package.module:Class.method(**arguments)``; never raises. ``timeout_s`` (what is left of
        the step's budget) bounds the call and any rebuild of the episode after it, below the call timeout."""

    @abc.abstractmethod
    def snapshot(self) -> dict[str, Any]:
        """Public state of every loaded instance, as JSON. Raises ``SandboxError`` when dead."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release resources (remove the container). Idempotent."""

    @property
    def alive(self) -> bool:
        return True
