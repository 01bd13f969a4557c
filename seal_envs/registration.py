"""Gymnasium registration of SEAL's environments (idempotent).

Uses ``gymnasium.envs.registration`` directly: it also runs from ``_seal_gym_hook`` while the ``gymnasium``
package itself is still being imported.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

ENV_IDS = ("seal/ToolUse-v0", "seal/Shop-v0")
MAX_EPISODE_STEPS = 200  # assistant messages per episode before TimeLimit truncates (turns cap at 20 each)


def register_envs() -> None:
    """Register every SEAL env id once; safe to call repeatedly."""
    if "seal/ToolUse-v0" in registry:
        return
    register(id="seal/ToolUse-v0", entry_point="seal_envs.env:ToolUseEnv", kwargs={"domain": "shop"},
             max_episode_steps=MAX_EPISODE_STEPS)
    register(id="seal/Shop-v0", entry_point="seal_envs.env:ToolUseEnv", kwargs={"domain": "shop"},
             max_episode_steps=MAX_EPISODE_STEPS)
