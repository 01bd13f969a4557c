"""SEAL environments: multi-turn tool use behind the Gymnasium API.

Importing this package registers ``seal/ToolUse-v0`` (and friends) with Gymnasium.
"""

from seal_envs.registration import register_envs

register_envs()

__all__ = ["register_envs"]
