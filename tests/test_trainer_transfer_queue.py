"""The trainer's advantage step and the interface board as they run in a job: on a local Ray cluster with a real
TransferQueue and the board as a named Ray actor. One Ray start for the module (about 20 s on 2 cores).

``SealPPOTrainer._compute_advantage`` reads the rollouts' fields and extra fields from TransferQueue and writes
``advantages``/``returns`` back; this reads back what it wrote. ``tests/test_trainer_step.py`` covers the
arithmetic without Ray.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from tensordict import NonTensorStack

from test_trainer_step import HAND_W, ROLLOUTS, grpo_by_hand, step_fields, trainer_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def transfer_queue():
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf

    from seal_trainer.envpool import reset_local_state

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        yield tq
        tq.close()
    finally:
        ray.shutdown()
        reset_local_state()


def test_the_advantages_written_to_transfer_queue_are_w_times_grpo(transfer_queue, tmp_path):
    tq = transfer_queue
    data, extras = step_fields()
    data["extra_fields"] = NonTensorStack(*extras)  # what the agent loop writes per rollout
    keys = [f"rollout-{i}" for i in range(len(ROLLOUTS))]
    batch = tq.kv_batch_put(keys=keys, partition_id="train_0", fields=data)
    trainer = trainer_for(tmp_path, "seal.reweighting.rho=fixed")
    metrics: dict[str, float] = {}
    trainer._compute_advantage(batch, metrics)
    written = tq.kv_batch_get(keys=keys, partition_id="train_0", select_fields=["advantages", "returns"])
    expected = [w * a for w, a in zip(HAND_W, grpo_by_hand())]
    for adv, ret, want, (*_, n, _, _) in zip(written["advantages"].unbind(), written["returns"].unbind(), expected,
                                             ROLLOUTS):
        assert adv.shape == (n,) and torch.equal(adv, ret)
        assert torch.allclose(adv, torch.full((n,), want, dtype=adv.dtype), atol=1e-5)
    assert metrics["seal/infrastructure_errors"] == 1.0 and trainer._seal_step["weights"] == pytest.approx(HAND_W,
                                                                                                          abs=1e-4)


def test_the_board_actor_carries_the_interface_to_a_workers_pools(transfer_queue):
    """The trainer's closed loop publishes to the named actor; an agent-loop worker's training pool adopts it."""
    import ray

    from seal_trainer.closed_loop import ClosedLoop
    from seal_trainer.envpool import BOARD_NAME, EnvSpec, board_get, get_board, get_env_pool

    loop = ClosedLoop()
    loop.observe([["argument_mismatch"] * 8], [["state_mismatch"] * 8], [0.0], epoch=0)
    state, _ = loop.update(step=1)
    board = get_board()
    assert board is not None and ray.get_actor(BOARD_NAME) is not None
    train = get_env_pool(EnvSpec(domain="shop", mode="train", sandbox="inprocess"))

    async def worker():
        version, doc = await board_get(board, 0)
        assert train.apply_interface(doc, version)
        env = await train.acquire()
        await train.release(env)
        return env

    assert asyncio.run(worker()).unwrapped.interface == state
