"""Gymnasium registration of SEAL's environments (idempotent).

Uses ``gymnasium.envs.registration`` directly: it also runs from ``_seal_gym_hook`` while the ``gymnasium``
package itself is still being imported.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.registration import register, registry

ENV_IDS = ("seal/ToolUse-v0", "seal/BFCL-v3-MultiTurn-v0", "seal/Shop-v0")
MAX_EPISODE_STEPS = 200  # assistant messages per episode before TimeLimit truncates (turns cap at 20 each)


def make_tool_use_env(domain: Any = None, **kwargs: Any):
    """``seal/ToolUse-v0``: any domain (``domain=``); with none given, the BFCL V3 multi-turn training split."""
    if domain is None and "tasks" not in kwargs:
        from seal_envs.bfcl import make_env

        return make_env(split="train", **kwargs)
    from seal_envs.env import ToolUseEnv

    return ToolUseEnv(domain=domain if domain is not None else "shop", **kwargs)


def register_envs() -> None:
    """Register every SEAL env id once; safe to call repeatedly."""
    if ENV_IDS[0] in registry:
        return
    register(id="seal/ToolUse-v0", entry_point="seal_envs.registration:make_tool_use_env",
             max_episode_steps=MAX_EPISODE_STEPS)
    register(id="seal/BFCL-v3-MultiTurn-v0", entry_point="seal_envs.bfcl:make_env", kwargs={"split": "train"},
             max_episode_steps=MAX_EPISODE_STEPS)
    register(id="seal/Shop-v0", entry_point="seal_envs.env:ToolUseEnv", kwargs={"domain": "shop"},
             max_episode_steps=MAX_EPISODE_STEPS)
