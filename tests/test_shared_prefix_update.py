"""The CPU actor update (seal_trainer/shared_prefix.py) computes verl's loss and gradients, with less compute.

Compared against verl's own FSDP engine code path (``FSDPEngineWithLMHead.forward_step`` with the same micro-batch,
the same model and verl's ``ppo_loss``), on a small random Qwen2 in float64 so that the tolerance is tight.
"""

from __future__ import annotations

import copy
import functools
import socket
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("verl")

from tensordict import TensorDict  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from seal_trainer.shared_prefix import (PACKED_ATTENTION, PREFIX_FLAG, SKIP_FLAG, Segment,  # noqa: E402
                                        engine_class, pack_rows, prompt_grouped_micro_batches,
                                        register_packed_attention, segment_attention, zero_advantage_rows)

VOCAB = 101


@pytest.fixture(autouse=True)
def cpu_platform():
    """verl's engine code asks its platform for the device: SEAL's CPU platform, for this module's tests only."""
    from verl.plugin.platform import platform_manager
    from verl.plugin.platform.platform_manager import PlatformRegistry

    from seal_trainer import cpu

    cpu.register()
    before = platform_manager._current_platform
    platform_manager._current_platform = PlatformRegistry.get("cpu")()
    yield
    platform_manager._current_platform = before


def _model(seed: int = 0, attention: str = "sdpa") -> torch.nn.Module:
    """``attention``: transformers' sdpa (dense under the packed mask) or SEAL's block-wise one, the CPU actor's."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    register_packed_attention()
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True, attn_implementation=attention)
    return Qwen2ForCausalLM(config).double()


def _nested(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _batch(groups: list[tuple[int, list[int]]], advantages: list[float], seed: int = 1) -> TensorDict:
    """Rows as verl's engine sees them: ``groups`` is [(prompt length, [response lengths])]; every third response
    token is a tool token (``response_mask`` 0)."""
    g = torch.Generator().manual_seed(seed)
    prompts, responses, ids = [], [], []
    for plen, lengths in groups:
        prompt = torch.randint(0, VOCAB, (plen,), generator=g)
        for rlen in lengths:
            response = torch.randint(0, VOCAB, (rlen,), generator=g)
            prompts.append(prompt), responses.append(response), ids.append(torch.cat([prompt, response]))
    masks = [(torch.arange(len(r)) % 3 != 2).long() for r in responses]
    adv = [torch.full((len(r),), a, dtype=torch.float64) for r, a in zip(responses, advantages, strict=True)]
    old = [-torch.rand(len(r), generator=g, dtype=torch.float64) for r in responses]
    data = TensorDict({"input_ids": _nested(ids), "position_ids": _nested([torch.arange(len(i)) for i in ids]),
                       "prompts": _nested(prompts), "responses": _nested(responses),
                       "response_mask": _nested(masks), "loss_mask": _nested([torch.cat([torch.zeros(len(p)), m])
                                                                              for p, m in zip(prompts, masks)]),
                       "advantages": _nested(adv), "old_log_probs": _nested(old)}, batch_size=len(ids))
    tu.assign_non_tensor(data, use_remove_padding=False, use_fused_kernels=False, use_dynamic_bsz=False,
                         temperature=0.7, calculate_entropy=False, dp_size=1, global_batch_size=len(ids),
                         max_response_len=-1)
    return data


def _loss_fn():
    from verl.workers.config import ActorConfig
    from verl.workers.utils.losses import ppo_loss

    config = ActorConfig(strategy="fsdp2", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1, use_kl_loss=False,
                         entropy_coeff=0.0, rollout_n=1)
    return functools.partial(ppo_loss, config=config)


def _engine(cls, module):
    """An engine object around ``module`` with what forward_step needs and no FSDP, mesh or optimizer."""
    engine = object.__new__(cls)
    engine.module, engine.use_ulysses_sp, engine.ulysses_sequence_parallel_size = module, False, 1
    engine.pad_to_length, engine._autocast_dtype, engine.scaler = None, torch.float32, None
    engine.get_data_parallel_group = lambda: None
    engine.get_data_parallel_size = lambda: 1
    engine.engine_config = SimpleNamespace(use_no_sync_for_gradient_accumulation=True)
    return engine


def _verl_engine_class():
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    return FSDPEngineWithLMHead


def _grads(module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attention", ["sdpa", PACKED_ATTENTION])
@pytest.mark.parametrize("share", [True, False])
def test_loss_and_gradients_equal_verls_per_sample_computation(share, attention):
    data = _batch([(17, [6, 9, 4]), (12, [7, 5])], advantages=[0.5, -1.0, 0.25, 1.5, -0.75])
    tu.assign_non_tensor(data, **{PREFIX_FLAG: share}, batch_num_tokens=int(data["loss_mask"].values().sum()))
    results = []
    for cls in (_verl_engine_class(), engine_class()):
        module = _model(attention=attention)
        loss, output = _engine(cls, module).forward_step(copy.deepcopy(data), _loss_fn(), forward_only=False)
        loss.backward()
        results.append((loss.detach(), _grads(module), output))
    (loss_verl, grads_verl, _), (loss_ours, grads_ours, _) = results
    torch.testing.assert_close(loss_ours, loss_verl, rtol=1e-10, atol=1e-12)
    assert grads_ours.keys() == grads_verl.keys() and grads_verl
    for name, grad in grads_verl.items():
        assert torch.allclose(grads_ours[name], grad, rtol=1e-6, atol=1e-9), (name, (grads_ours[name] - grad).abs().max(), grad.abs().max())


@pytest.mark.parametrize("attention", ["sdpa", PACKED_ATTENTION])
def test_log_probs_equal_verls_where_the_loss_reads_them_and_old_ones_elsewhere(attention):
    data = _batch([(10, [8, 8])], advantages=[1.0, -1.0])
    tu.assign_non_tensor(data, **{PREFIX_FLAG: True})
    module = _model(attention=attention)
    with torch.no_grad():
        _, verl_out = _engine(_verl_engine_class(), module).forward_step(copy.deepcopy(data), None, True)
        _, our_out = _engine(engine_class(), module).forward_step(copy.deepcopy(data), None, True)
    for row, (ours, theirs, mask, old) in enumerate(zip(our_out["model_output"]["log_probs"].unbind(),
                                                         verl_out["model_output"]["log_probs"].unbind(),
                                                         data["response_mask"].unbind(),
                                                         data["old_log_probs"].unbind())):
        response = slice(10 - 1, 10 - 1 + len(mask))
        read = mask.bool()
        torch.testing.assert_close(ours[response][read], theirs[response][read], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(ours[response][~read], old[~read])  # ratio 1 where nothing is computed


def test_a_shared_prompt_goes_forward_once_and_responses_never_see_each_other():
    ids = [torch.tensor([1, 2, 3, 4, 5]), torch.tensor([1, 2, 3, 6, 7, 8]), torch.tensor([9, 9, 4])]
    packed = pack_rows(ids, [torch.arange(len(i)) for i in ids], prompt_lengths=[3, 3, 2])
    assert packed.input_ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 4]
    assert packed.position_ids.tolist() == [0, 1, 2, 3, 4, 3, 4, 5, 0, 1, 2]
    assert [i.tolist() for i in packed.index] == [[0, 1, 2, 3, 4], [0, 1, 2, 5, 6, 7], [8, 9, 10]]
    mask = packed.attention_mask
    assert mask[5].tolist() == [True, True, True, False, False, True] + [False] * 5  # row 2's 1st response token
    assert not mask[8:, :8].any() and not mask[:8, 8:].any()  # groups are apart
    assert packed.segments == (Segment(0, 3), Segment(3, 5, (0, 3)), Segment(5, 8, (0, 3)), Segment(8, 10),
                               Segment(10, 11, (8, 10)))
    assert pack_rows(ids, [torch.arange(len(i)) for i in ids], [3, 3, 2], share_prompts=False).input_ids.numel() == 14


def test_segment_attention_equals_dense_attention_under_the_packed_mask():
    """Values and gradients, grouped-query heads, prompts interleaved with responses, one empty response."""
    ids = [torch.arange(7), torch.cat([torch.arange(5), torch.arange(9)]), torch.arange(5),
           torch.tensor([0, 1, 2, 3, 9, 9])]
    packed = pack_rows(ids, [torch.arange(len(i)) for i in ids], prompt_lengths=[4, 5, 5, 4])
    assert [s.prompt for s in packed.segments] == [None, (0, 4), None, (7, 12), (0, 4)]  # row 2's response is empty
    g = torch.Generator().manual_seed(0)
    length = packed.input_ids.numel()
    q, k, v = (torch.randn(1, heads, length, 8, generator=g, dtype=torch.float64, requires_grad=True)
               for heads in (4, 2, 2))
    weights = torch.randn(1, 4, length, 8, generator=g, dtype=torch.float64)
    results = []
    for attend in (lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=packed.attention_mask, scale=0.3, enable_gqa=True),
                   lambda: segment_attention(q, k, v, packed.segments, scale=0.3)):
        q.grad = k.grad = v.grad = None
        out = attend()
        (out * weights).sum().backward()
        results.append((out.detach(), q.grad, k.grad, v.grad))
    for dense, blocks in zip(*results, strict=True):
        torch.testing.assert_close(blocks, dense, rtol=1e-12, atol=1e-12)


def test_rows_with_zero_advantage_are_found_and_micro_batches_keep_a_prompts_rows_together():
    data = _batch([(5, [3, 3]), (4, [2, 2, 2])], advantages=[0.0, 0.0, 1.0, 0.0, -1.0])
    assert zero_advantage_rows(data) == [0, 1, 3]
    assert prompt_grouped_micro_batches(data, [0, 2, 3, 4], max_rows=2) == [[0], [2, 3], [4]]


@pytest.fixture()
def process_group():
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_leaving_out_zero_advantage_rows_changes_no_gradient(process_group):
    """The whole mini-batch through verl's engine vs ours with zero-advantage rows skipped and prompts shared."""
    data = _batch([(9, [5, 7]), (11, [6, 4]), (8, [3, 5])], advantages=[0.0, 0.0, 1.0, -1.0, 0.0, 0.0])
    tu.assign_non_tensor(data, micro_batch_size_per_gpu=2)
    results = []
    for cls, flags in ((_verl_engine_class(), {}), (engine_class(), {PREFIX_FLAG: True, SKIP_FLAG: True})):
        batch = copy.deepcopy(data)
        tu.assign_non_tensor(batch, **flags)
        module = _model()
        output = _engine(cls, module).forward_backward_batch(batch, _loss_fn())
        results.append((_grads(module), output["metrics"]))
    (grads_verl, _), (grads_ours, metrics) = results
    assert metrics["update_rows"] == [2.0] and metrics["update_rows_skipped"] == [4.0]
    for name, grad in grads_verl.items():
        assert torch.allclose(grads_ours[name], grad, rtol=1e-6, atol=1e-9), (name, (grads_ours[name] - grad).abs().max(), grad.abs().max())


def test_the_attention_cpu_overrides_name_is_what_the_cpu_engine_registers():
    """The actor loads with ``cpu_overrides``' attention only if the CPU platform's start registered it."""
    from transformers import AttentionInterface

    from seal_trainer import shared_prefix
    from seal_trainer.cpu import cpu_overrides

    (named,) = [o.split("=", 1)[1] for o in cpu_overrides() if "attn_implementation" in o]
    shared_prefix.register()
    assert named == PACKED_ATTENTION and named in AttentionInterface._global_mapping
    module = _model(attention=named)
    ids = torch.randint(0, VOCAB, (2, 9))
    with torch.no_grad():  # an unpacked forward (verl's own, generation) is sdpa's
        torch.testing.assert_close(module(input_ids=ids).logits, _model(attention="sdpa")(input_ids=ids).logits)
