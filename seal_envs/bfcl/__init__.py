"""BFCL V3 multi-turn as a SEAL domain, on top of bfcl-eval (its data, backends and checker, used at run time).

``bfcl_env_kwargs(split, category, mode)`` gives the ``ToolUseEnv`` keyword arguments for a split;
``make_env`` is the Gymnasium entry point of ``seal/BFCL-v3-MultiTurn-v0``. Importing this package is cheap:
bfcl-eval is imported on first use.

What the environment shows the policy is what BFCL's multi-turn FC inference loop sends: no system prompt;
the tools of the entry's backends as ``tools=`` schemas (BFCL's descriptions with its "Python 3 syntax" hint,
Gorilla types mapped to JSON Schema by BFCL's table, see ``tool_specs/bfcl/make_specs.py``); one user message
per turn; for a miss_func holdout turn BFCL's "I have updated some more functions you can choose from. What
about now?" with the missed functions appended to the tools; tool results as BFCL words them. Actions are
decoded, executed and judged by BFCL's rules (``seal_envs.bfcl.protocol``), in both modes; a turn whose 21st
tool-calling step is made is force-quit (BFCL's ``MAXIMUM_STEP_LIMIT`` of 20), which fails the entry unless it
is the last turn.
"""

from __future__ import annotations

from typing import Any, Literal

DOMAIN = "bfcl"
# BFCL force-quits an entry when a turn's tool-calling steps exceed MAXIMUM_STEP_LIMIT (20), i.e. on the 21st;
# with a cap of 21 our env ends the turn at that same step and the evaluation scores it as BFCL's failure.
MAX_STEPS_PER_TURN = 21
SYSTEM_PROMPT: str | None = None  # BFCL's FC handlers send no system prompt for multi-turn entries
MAX_OUTPUT_BYTES = 1 << 22  # BFCL never cuts a tool result (31,706 characters at most on the 800 ground truths)


def bfcl_tasks(split: Literal["train", "eval", "all"] = "train", category: str | None = None) -> tuple:
    """Tasks of a split (``split.json``), optionally of one category, in BFCL's order."""
    from seal_envs.bfcl.data import CATEGORIES
    from seal_envs.bfcl.split import split_ids
    from seal_envs.bfcl.tasks import load_category

    if category is not None and category not in CATEGORIES:
        raise ValueError(f"unknown BFCL category {category!r}; choose from {', '.join(CATEGORIES)}")
    ids = split_ids(split)
    return tuple(t for c in ([category] if category else CATEGORIES) for t in load_category(c) if t.id in ids)


def bfcl_env_kwargs(split: Literal["train", "eval", "all"] = "train", category: str | None = None,
                    mode: Literal["train", "eval"] = "train",
                    sandbox: Literal["docker", "inprocess"] = "docker") -> dict[str, Any]:
    """``ToolUseEnv(**kwargs)`` for a BFCL split: one domain with every backend's tools, per-task tool lists."""
    from seal_envs.bfcl.protocol import BFCL
    from seal_envs.sandbox import SandboxConfig

    return {
        "domain": DOMAIN,
        "tasks": bfcl_tasks(split, category),
        "mode": mode,
        "sandbox": SandboxConfig(backend=sandbox, max_output_bytes=MAX_OUTPUT_BYTES),
        "system_prompt": SYSTEM_PROMPT,
        "max_steps_per_turn": MAX_STEPS_PER_TURN,
        "protocol": BFCL,
    }


def make_env(split: Literal["train", "eval", "all"] = "train", category: str | None = None,
             mode: Literal["train", "eval"] = "train", sandbox: Literal["docker", "inprocess"] = "docker",
             **kwargs: Any):
    """Gymnasium entry point: ``gym.make("seal/BFCL-v3-MultiTurn-v0", split=..., category=..., mode=...)``."""
    from seal_envs.env import ToolUseEnv

    return ToolUseEnv(**{**bfcl_env_kwargs(split, category, mode, sandbox), **kwargs})


__all__ = ["DOMAIN", "MAX_STEPS_PER_TURN", "bfcl_env_kwargs", "bfcl_tasks", "make_env"]
