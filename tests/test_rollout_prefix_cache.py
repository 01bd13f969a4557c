"""The CPU rollout server: reusing earlier keys/values never changes what is generated; concurrent requests share
batches and seeded rollouts replay; a weight update changes the rollout policy, and a sync that loads nothing raises."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    from seal_trainer.tiny import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", vocab_size=768))


def _episode(server, prompt: list[int]) -> list[tuple[list[int], list[float]]]:
    """Three assistant turns, each extending the conversation like the agent loop does."""
    outs, ids = [], list(prompt)
    for turn in range(3):
        out = server._generate(ids, {"temperature": 0.0, "max_tokens": 12, "logprobs": True})
        outs.append((out.token_ids, out.log_probs))
        ids = ids + list(out.token_ids) + [5 + turn, 6, 7]  # a tool result appended as context
    return outs


def test_cached_generation_equals_uncached(model_path):
    from seal_trainer.cpu import HFRolloutServerImpl

    plain = HFRolloutServerImpl(model_path, 64, prefix_caching=False)
    cached = HFRolloutServerImpl(model_path, 64, prefix_caching=True)
    prompt = list(range(10, 90))
    for server in (plain, cached):
        server.runs = [_episode(server, prompt), _episode(server, prompt + [3])]  # second shares the prefix
    for (a_ids, a_lp), (b_ids, b_lp) in zip(sum(plain.runs, []), sum(cached.runs, [])):
        assert a_ids == b_ids
        assert a_lp == pytest.approx(b_lp, abs=1e-4)
    assert plain.stats()["reused_tokens"] == 0
    stats = cached.stats()
    assert stats["reused_tokens"] > 3 * stats["prefill_tokens"], stats


def test_a_weight_update_invalidates_the_cache(model_path):
    from seal_trainer.cpu import HFRolloutServerImpl

    server = HFRolloutServerImpl(model_path, 64)
    server._generate(list(range(10, 50)), {"temperature": 0.0, "max_tokens": 4})
    server.update_weights({k: v.clone() for k, v in server.model.state_dict().items()}, global_steps=1)
    before = server.stats()["reused_tokens"]
    server._generate(list(range(10, 50)), {"temperature": 0.0, "max_tokens": 4})
    assert server.stats()["reused_tokens"] == before


def _greedy(server, prompt, n=12):
    return server._generate(prompt, {"temperature": 0.0, "max_tokens": n}).token_ids


def test_the_rollout_policy_changes_after_a_weight_update(model_path):
    import torch

    from seal_trainer.cpu import HFRolloutServerImpl

    server = HFRolloutServerImpl(model_path, 64)
    prompt = list(range(10, 60))
    before = _greedy(server, prompt)
    torch.manual_seed(0)
    updated = {k: v + 0.5 * torch.randn_like(v) for k, v in server.model.state_dict().items()}
    assert server.update_weights(updated, global_steps=1) == len(updated)
    after = server._generate(prompt, {"temperature": 0.0, "max_tokens": 12})
    assert after.token_ids != before and after.extra_fields["global_steps"] == 1
    fresh = HFRolloutServerImpl(model_path, 64)  # the update reaches the decode exactly: equal to a fresh load
    fresh.model.load_state_dict(updated)
    assert _greedy(fresh, prompt) == after.token_ids


def test_a_weight_sync_that_loads_no_tensor_raises(model_path):
    from seal_trainer.cpu import HFRolloutServerImpl

    server = HFRolloutServerImpl(model_path, 64)
    renamed = {f"base_model.model.{k}": v for k, v in server.model.state_dict().items()}  # e.g. a PEFT wrapper's
    with pytest.raises(ValueError, match="weight sync loaded no tensor"):
        server.update_weights(renamed, global_steps=1)
    assert server.global_steps == 0


def test_concurrent_requests_share_batches_and_seeded_rollouts_replay(model_path):
    import asyncio

    from seal_trainer.cpu import HFRolloutServerImpl

    prompts = [list(range(10, 60)), list(range(20, 50))]
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 16, "logprobs": True}

    async def step(server, order):
        outs = await asyncio.gather(*[server.generate(prompt_ids=prompts[i % 2], sampling_params={**params, "seed": i})
                                      for i in order])
        return {i: (o.token_ids, o.log_probs) for i, o in zip(order, outs)}

    server = HFRolloutServerImpl(model_path, 64, seed=7)
    first = asyncio.run(step(server, range(8)))
    assert server.stats()["batches"] < 8 and server.stats()["calls"] == 8
    again = HFRolloutServerImpl(model_path, 64, seed=7)
    replay = {i: asyncio.run(step(again, [i]))[i] for i in reversed(range(8))}  # alone, in another order
    assert [first[i][0] for i in range(8)] == [replay[i][0] for i in range(8)]
    assert len({tuple(first[i][0]) for i in (0, 2, 4, 6)}) > 1  # one prompt, different seeds: different samples
    assert all(len(lp) == len(ids) for ids, lp in first.values())


def test_each_rollout_is_seeded_from_the_runs_seed():
    from types import SimpleNamespace

    from seal_trainer.agent_loop import SealToolEnvAgentLoop

    def seed(run_seed=42, backend="hf", **row):
        loop = SimpleNamespace(rollout_config=SimpleNamespace(seed=run_seed, name=backend))
        return SealToolEnvAgentLoop._sample_seed(loop, {"index": 3, "global_steps": 1, "seal_mode": "train", **row})

    group = [seed(session_id=s) for s in range(8)]
    assert len(set(group)) == 8 and group == [seed(session_id=s) for s in range(8)]  # distinct, replayable
    assert seed(session_id=0, run_seed=43) != group[0] and seed(session_id=0, global_steps=2) != group[0]
    assert seed() is None and seed(session_id=0, backend="sglang") is None  # unknown rollout index / no seed API


def _verl_merged_lora_weights(model_path: str) -> dict:
    """What verl's FSDP2 engine sends the rollout with ``lora.merge=True`` (``_merged_lora_per_tensor_param``): a
    PEFT LoRA model, each decoder layer and the root sharded as verl shards them, merged in
    ``merged_lora_context`` and named by ``normalize_peft_param_name`` + ``convert_weight_keys``."""
    import os
    import socket

    import torch
    import torch.distributed as dist
    from peft import LoraConfig, get_peft_model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM
    from verl.utils.fsdp_utils import merged_lora_context, normalize_peft_param_name
    from verl.utils.model import convert_weight_keys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_path),
                               LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"]))
        mesh = init_device_mesh("cpu", (1,))
        for layer in model.base_model.model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        torch.manual_seed(0)
        for name, param in model.named_parameters():
            if "lora_B" in name:  # an adapter after some updates (PEFT starts it at zero)
                torch.nn.init.normal_(param, std=0.5)
        with merged_lora_context(model, backup_adapters=True):
            params = convert_weight_keys(normalize_peft_param_name(model.state_dict()), model)
            return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone() for k, v in params.items()}
    finally:
        dist.destroy_process_group()


def test_a_merged_lora_update_changes_the_rollout_policy(model_path):
    from seal_trainer.cpu import HFRolloutServerImpl

    merged = _verl_merged_lora_weights(model_path)
    server = HFRolloutServerImpl(model_path, 64)
    base = {k: v.clone() for k, v in server.model.state_dict().items()}
    prompt = list(range(10, 60))
    before = _greedy(server, prompt)
    assert server.update_weights(merged, global_steps=1) == len(base)  # every tensor by its Hugging Face name
    changed = [k for k in base if not server.model.state_dict()[k].equal(base[k])]
    assert changed and all(any(m in k for m in ("q_proj", "v_proj", "down_proj")) for k in changed)
    assert _greedy(server, prompt) != before


def test_sleep_frees_the_stored_keys_and_values_and_generation_goes_on_unchanged(model_path):
    """verl sleeps the replicas before the actor update: the server keeps no stored keys/values through it."""
    import asyncio

    from seal_trainer.cpu import HFRolloutServerImpl

    server = HFRolloutServerImpl(model_path, 64)
    prompt = list(range(10, 60))
    first = _greedy(server, prompt)
    gen = server.generator
    assert gen.cache.nbytes > 0  # what a step's generation leaves behind
    asyncio.run(server.sleep())
    assert gen.cache.nbytes == 0
    assert _greedy(server, prompt) == first  # prefilled anew, the same policy
