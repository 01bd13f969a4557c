"""verl hides plugin load errors: check that `import verl` leaves our names in its registries."""

import subprocess
import sys


def test_verl_registries_hold_seal_names():
    code = (
        "import verl\n"
        "from seal_trainer import plugin\n"
        "assert not plugin.ERRORS, plugin.ERRORS\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
        "from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY\n"
        "from verl.plugin.platform.platform_manager import PlatformRegistry\n"
        "from verl.workers.rollout.replica import RolloutReplicaRegistry\n"
        "from verl.workers.rollout.base import _ROLLOUT_REGISTRY\n"
        "assert 'seal_tool_env' in _agent_loop_registry\n"
        "assert 'seal_grpo' in ADV_ESTIMATOR_REGISTRY\n"
        "assert 'seal_sync' in TRAINER_REGISTRY\n"
        "assert 'cpu' in PlatformRegistry.registered_names()\n"
        "assert 'hf' in RolloutReplicaRegistry._registry and ('hf', 'async') in _ROLLOUT_REGISTRY\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
