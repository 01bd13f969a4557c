"""Sandboxes execute tool calls in isolation: Docker containers by default, in-process for debugging."""

from seal_envs.sandbox.base import CallResult, Sandbox, SandboxConfig, SandboxError
from seal_envs.sandbox.pool import SandboxPool, get_pool

__all__ = ["CallResult", "Sandbox", "SandboxConfig", "SandboxError", "SandboxPool", "get_pool"]
