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


def test_the_cpu_shim_announces_a_cuda_call_it_does_not_implement(caplog):
    from seal_trainer.cpu import CPU_DEVICE

    assert CPU_DEVICE.device_count() == 1 and CPU_DEVICE.memory_allocated() == 0  # implemented: silent
    with caplog.at_level("WARNING", logger="seal_trainer.cpu"):
        assert CPU_DEVICE.graph_pool_handle_for_test() is None
        CPU_DEVICE.graph_pool_handle_for_test()
    lines = [r.getMessage() for r in caplog.records if "graph_pool_handle_for_test" in r.getMessage()]
    assert len(lines) == 1 and "does nothing here" in lines[0]
