"""Gymnasium registration of SEAL's environments (idempotent; also the ``gymnasium.envs`` entry point)."""

from __future__ import annotations

import gymnasium as gym

ENV_IDS = ("seal/ToolUse-v0", "seal/Shop-v0")


def register_envs() -> None:
    """Register every SEAL env id once; safe to call repeatedly."""
    if "seal/ToolUse-v0" in gym.registry:
        return
    gym.register(id="seal/ToolUse-v0", entry_point="seal_envs.env:ToolUseEnv", kwargs={"domain": "shop"})
    gym.register(id="seal/Shop-v0", entry_point="seal_envs.env:ToolUseEnv", kwargs={"domain": "shop"})
