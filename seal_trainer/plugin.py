"""verl plugin entry point (``[project.entry-points."verl.plugins"] seal = "seal_trainer.plugin"``).

verl imports this module at the end of ``import verl`` in every process (driver, task runner, workers,
agent-loop workers) and *hides* any exception it raises, so ``tests/test_trainer_plugin.py`` checks that
verl's registries hold our names afterwards. It registers:

- agent loop ``seal_tool_env`` (``seal_trainer.agent_loop``);
- advantage estimator ``seal_grpo`` (``seal_trainer.advantage``);
- V1 trainer mode ``seal_sync`` (``seal_trainer.trainer``);
- platform ``cpu`` and rollout backend ``hf`` (``seal_trainer.cpu``; only selected by ``VERL_PLATFORM=cpu``
  and ``rollout.name=hf``, so inert on GPU machines).

Set ``SEAL_PLUGIN_STRICT=1`` to make a failing registration raise in ``register_all`` (used by the tests).
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)
ERRORS: dict[str, str] = {}


def register_all(strict: bool | None = None) -> dict[str, str]:
    """Run every registration; return {part: error} for those that failed."""
    strict = os.environ.get("SEAL_PLUGIN_STRICT") == "1" if strict is None else strict
    parts = {
        "cpu": lambda: __import__("seal_trainer.cpu", fromlist=["register"]).register(),
        "advantage": lambda: __import__("seal_trainer.advantage", fromlist=["_register"])._register(),
        "agent_loop": lambda: __import__("seal_trainer.agent_loop"),
        "trainer": lambda: __import__("seal_trainer.trainer"),
    }
    for name, fn in parts.items():
        try:
            fn()
            ERRORS.pop(name, None)
        except Exception as exc:  # verl swallows plugin errors; keep ours visible
            ERRORS[name] = repr(exc)
            logger.warning("SEAL verl plugin: registering %s failed: %r", name, exc)
            if strict:
                raise
    return dict(ERRORS)


register_all(strict=False)
