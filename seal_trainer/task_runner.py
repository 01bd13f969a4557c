"""``SealTaskRunner``: verl's V1 task runner with SEAL's registrations loaded in its Ray process.

``seal-train`` launches it through ``verl.trainer.main_ppo.run_ppo(config, task_runner_class=SealTaskRunner)``. It
lives apart from ``seal_trainer.trainer`` so that the plugin (which registers the trainer) and the trainer never
import each other.
"""

from __future__ import annotations

import ray
from verl.trainer.main_ppo import TaskRunnerV1


@ray.remote
class SealTaskRunner(TaskRunnerV1.__ray_actor_class__ if hasattr(TaskRunnerV1, "__ray_actor_class__") else object):
    """verl's V1 task runner, with SEAL's registrations loaded in its process."""

    def run(self, config):
        import seal_trainer.plugin  # noqa: F401  (registers agent loop, estimator, trainer, cpu shims)

        return super().run(config)


__all__ = ["SealTaskRunner"]
