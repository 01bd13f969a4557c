"""SEAL environments: multi-turn tool use behind the Gymnasium API.

Importing this package registers ``seal/ToolUse-v0`` (and friends) with Gymnasium; the heavier modules
load on first use (``from seal_envs import ToolUseEnv``).
"""

from importlib import import_module
from typing import Any

from seal_envs.registration import register_envs

register_envs()

_LAZY = {
    "ToolUseEnv": "seal_envs.env",
    "InterfaceState": "seal_envs.interface",
    "Label": "seal_envs.diagnosis",
    "SandboxConfig": "seal_envs.sandbox",
    "Task": "seal_envs.task",
    "ToolCall": "seal_envs.task",
    "load_domain": "seal_envs.spec",
    "load_tasks": "seal_envs.task",
    "parse_tool_calls": "seal_envs.parsing",
    "get_tool_format": "seal_envs.formats",
    "register_tool_format": "seal_envs.formats",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'seal_envs' has no attribute {name!r}")


__all__ = ["register_envs", *_LAZY]
