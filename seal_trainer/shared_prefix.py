"""The actor update without the compute that carries no gradient (CPU runs): verl's FSDP engine, three cuts.

A GRPO group's samples share one prompt (82% of a shop episode's tokens), verl's engine pushes every sample through
the model separately and computes the full-vocabulary logits at every position, prompt included. Here:

- **shared prefix** (Prefix Grouper, arXiv 2506.05433; verl's ``actor.use_prefix_grouper``, which verl's V1 FSDP
  engine ignores): the rows of a micro-batch that share a prompt become one packed sequence, the prompt once and
  each response after it, with an attention mask under which every response sees the prompt and itself only and
  position ids that continue the prompt's. Attention and every layer's output per response are exactly those of
  the separate sequence, so log-probs, loss and gradients are the per-sample ones (up to summation order).
  Attention runs block by block (``segment_attention``: the prompt causally on itself once, each response on the
  prompt's keys and its own) rather than dense under the mask, which would compute every query-key pair of the
  packed group, other responses' included: 2.2x less attention time at a shop group's shape;
- **logits where the loss reads them**: the LM head runs only at the positions that predict a response token with
  ``response_mask`` 1 (``logits_to_keep``); other positions get the rollout's old log-prob (ratio 1) or 0;
- **no update compute for rows with zero advantage**: with the vanilla policy loss, no KL loss and no entropy term
  a row whose advantages are all 0 contributes exactly zero gradient; such rows are left out of the update's
  forward and backward (the loss keeps its normaliser: verl's token count of the whole mini-batch). The trainer
  decides when that is exact (``SealPPOTrainer._update_actor``) and says so in the batch
  (``skip_zero_advantage_rows``).

Only the plain layout SEAL's CPU config uses is handled here (no padding removal, no sequence parallelism, no fused
kernels, text only); anything else goes to verl's own code unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

PREFIX_FLAG = "use_prefix_grouper"
SKIP_FLAG = "skip_zero_advantage_rows"
PACKED_ATTENTION = "seal_packed_sdpa"  # the actor's attn_implementation on CPU (``cpu_overrides``)
SEGMENTS_KWARG = "seal_packed_segments"  # how a packed forward hands its segments to ``PACKED_ATTENTION``


@dataclass(frozen=True)
class Segment:
    """Tokens ``start:end`` of a packed sequence: a prompt (``prompt`` None), which attends causally to itself, or a
    response, which attends to its prompt's tokens ``prompt[0]:prompt[1]`` and causally to itself."""

    start: int
    end: int
    prompt: tuple[int, int] | None = None


@dataclass(frozen=True)
class PackedRows:
    """Several rows (prompt + response token sequences) as one sequence in which each shared prompt appears once.

    ``index[r][t]`` is where row ``r``'s token ``t`` sits in the packed sequence; ``segments`` tile it in order."""

    input_ids: torch.Tensor      # (T,)
    position_ids: torch.Tensor   # (T,)
    attention_mask: torch.Tensor  # (T, T) bool, True: may attend
    index: list[torch.Tensor]
    segments: tuple[Segment, ...]


def pack_rows(input_ids: Sequence[torch.Tensor], position_ids: Sequence[torch.Tensor],
              prompt_lengths: Sequence[int], share_prompts: bool = True) -> PackedRows:
    """Pack rows; rows whose prompt tokens and positions are equal share one copy of the prompt (if
    ``share_prompts``). A token may attend to an earlier-positioned token of its own segment or of its group's
    prompt, never to another response or another group."""
    prompt_at: dict[tuple, torch.Tensor] = {}  # prompt key -> where that prompt sits in the packed sequence
    ids, pos, group_of, seg_of, index, segments = [], [], [], [], [], []
    offset = 0

    def append(tokens: torch.Tensor, positions: torch.Tensor, group: int, segment: int,
               prompt: tuple[int, int] | None) -> torch.Tensor:
        nonlocal offset
        ids.append(tokens), pos.append(positions)
        group_of.append(torch.full((len(tokens),), group)), seg_of.append(torch.full((len(tokens),), segment))
        if len(tokens):
            segments.append(Segment(offset, offset + len(tokens), prompt))
        offset += len(tokens)
        return torch.arange(offset - len(tokens), offset)

    for row, (row_ids, row_pos, plen) in enumerate(zip(input_ids, position_ids, prompt_lengths, strict=True)):
        plen = int(plen)
        key = (tuple(row_ids[:plen].tolist()), tuple(row_pos[:plen].tolist())) if share_prompts else (row,)
        if key not in prompt_at:
            prompt_at[key] = append(row_ids[:plen], row_pos[:plen], len(prompt_at), -1, None)
        group, prompt = list(prompt_at).index(key), prompt_at[key]
        span = (int(prompt[0]), int(prompt[-1]) + 1) if len(prompt) else (0, 0)
        index.append(torch.cat([prompt, append(row_ids[plen:], row_pos[plen:], group, row, span)]))
    group, seg, p = torch.cat(group_of), torch.cat(seg_of), torch.cat(pos)
    mask = ((group[:, None] == group[None, :]) & ((seg[None, :] == -1) | (seg[None, :] == seg[:, None]))
            & (p[None, :] <= p[:, None]))
    return PackedRows(torch.cat(ids), p, mask, index, tuple(segments))


def segment_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, segments: Sequence[Segment],
                      scale: float | None = None, dropout: float = 0.0) -> torch.Tensor:
    """Attention over a packed sequence (batch 1; ``(1, heads, T, dim)``, grouped-query keys allowed), segment by
    segment: the same result as dense attention under ``pack_rows``' mask (positions rise within a segment), without
    the query-key pairs that mask removes. Returns ``(1, heads, T, dim)``."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    gqa = key.shape[1] != query.shape[1]
    out = []
    for segment in segments:
        own = slice(segment.start, segment.end)
        if segment.prompt is None:
            out.append(sdpa(query[:, :, own], key[:, :, own], value[:, :, own], dropout_p=dropout, scale=scale,
                            is_causal=True, enable_gqa=gqa))
            continue
        prompt = slice(*segment.prompt)
        n, m = segment.end - segment.start, segment.prompt[1] - segment.prompt[0]
        mask = torch.ones(n, m + n, dtype=torch.bool, device=query.device)
        mask[:, m:] = torch.ones(n, n, dtype=torch.bool, device=query.device).tril()
        out.append(sdpa(query[:, :, own], torch.cat([key[:, :, prompt], key[:, :, own]], dim=2),
                        torch.cat([value[:, :, prompt], value[:, :, own]], dim=2), attn_mask=mask,
                        dropout_p=dropout, scale=scale, enable_gqa=gqa))
    return torch.cat(out, dim=2)


def _packed_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs):
    """``PACKED_ATTENTION``: ``segment_attention`` in a packed forward (one that passes ``SEGMENTS_KWARG``),
    transformers' sdpa attention in any other (verl's own forwards, generation)."""
    segments = kwargs.pop(SEGMENTS_KWARG, None)
    if segments is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"a packed forward has batch size 1, got {query.shape[0]}")
    return segment_attention(query, key, value, segments, scaling, dropout).transpose(1, 2).contiguous(), None


def register_packed_attention() -> str:
    """Register ``PACKED_ATTENTION`` with transformers (attention, and sdpa's mask for the unpacked forwards)."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(PACKED_ATTENTION, _packed_attention)
    AttentionMaskInterface.register(PACKED_ATTENTION, sdpa_mask)
    return PACKED_ATTENTION


def _rows(tensor: torch.Tensor) -> list[torch.Tensor]:
    return list(tensor.unbind()) if tensor.is_nested else list(tensor)


def response_log_probs(module: torch.nn.Module, micro_batch, share_prompts: bool) -> dict[str, torch.Tensor]:
    """``model_output`` as verl's engine builds it (nested ``log_probs``, and ``entropy`` if asked), computed from
    one packed forward; log-probs (and entropies) only at positions predicting a response token with
    ``response_mask`` 1, the rollout's old log-prob (else 0) at the other response positions, 0 in the prompt."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    input_ids, position_ids = micro_batch["input_ids"], micro_batch["position_ids"]
    ids, pos = _rows(input_ids), _rows(position_ids)
    prompt_lengths = micro_batch["prompts"].offsets().diff().tolist()
    response_masks = _rows(micro_batch["response_mask"])
    old = _rows(micro_batch["old_log_probs"]) if "old_log_probs" in micro_batch.keys() else None
    temperature = micro_batch["temperature"]
    temperature = (temperature.float().reshape(-1).expand(len(ids)) if isinstance(temperature, torch.Tensor)
                   else torch.full((len(ids),), float(temperature)))
    calculate_entropy = tu.get_non_tensor_data(data=micro_batch, key="calculate_entropy", default=False)

    packed = pack_rows(ids, pos, prompt_lengths, share_prompts)
    # row r's token t is predicted at position t - 1; response token j is row token prompt_length + j
    used = [plen - 1 + torch.nonzero(mask.bool(), as_tuple=True)[0]
            for plen, mask in zip(prompt_lengths, response_masks, strict=True)]
    keep = torch.cat([index[t] for index, t in zip(packed.index, used, strict=True)])
    labels = torch.cat([row[t + 1] for row, t in zip(ids, used, strict=True)])
    device = input_ids.values().device if input_ids.is_nested else input_ids.device
    output = module(input_ids=packed.input_ids[None].to(device), position_ids=packed.position_ids[None].to(device),
                    attention_mask=packed.attention_mask[None, None].to(device), use_cache=False,
                    logits_to_keep=keep.to(device), **{SEGMENTS_KWARG: packed.segments})
    logits = output.logits[0]
    row_temperature = torch.cat([temperature[r].expand(len(t)) for r, t in enumerate(used)]).to(logits)
    if not torch.all(row_temperature == 1):
        logits = logits / row_temperature[:, None]
    log_probs = logprobs_from_logits(logits=logits, labels=labels.to(device), inplace_backward=not calculate_entropy)
    values = {"log_probs": log_probs}
    if calculate_entropy:
        values["entropy"] = entropy_from_logits(logits)

    out = {}
    for name, computed in values.items():
        full, start = [], 0
        for r, t in enumerate(used):
            row = torch.zeros(ids[r].shape[0], dtype=computed.dtype, device=computed.device)
            if name == "log_probs" and old is not None:
                row[prompt_lengths[r] - 1: prompt_lengths[r] - 1 + old[r].shape[0]] = old[r].detach().to(row)
            full.append(row.index_put((t.to(row.device),), computed[start:start + len(t)]))
            start += len(t)
        out[name] = torch.nested.nested_tensor_from_jagged(torch.cat(full), input_ids.offsets())
    return out


def zero_advantage_rows(data) -> list[int]:
    """Rows whose advantages are 0 at every position the loss reads (``response_mask`` 1)."""
    return [r for r, (adv, mask) in enumerate(zip(_rows(data["advantages"]), _rows(data["response_mask"]),
                                                   strict=True))
            if not torch.any(adv[mask.bool()] != 0)]


def prompt_grouped_micro_batches(data, rows: Sequence[int], max_rows: int) -> list[list[int]]:
    """``rows`` in micro-batches of at most ``max_rows``, rows with the same prompt together (in order)."""
    groups: dict[tuple, list[int]] = {}
    prompts = _rows(data["prompts"])
    for r in rows:
        groups.setdefault(tuple(prompts[r].tolist()), []).append(r)
    return [members[i:i + max_rows] for members in groups.values() for i in range(0, len(members), max_rows)]


def _unhandled(engine, data) -> str | None:
    """Why this batch's layout is not the plain one of SEAL's CPU config (then verl's own code runs), or None."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.dataset_utils import DatasetPadMode
    from verl.utils.model import extract_multi_modal_inputs

    def flag(key: str, default=False):
        return tu.get_non_tensor_data(data=data, key=key, default=default)

    reasons = {"use_remove_padding": flag("use_remove_padding", True), "use_fused_kernels": flag("use_fused_kernels"),
               "distillation_use_topk": flag("distillation_use_topk"),
               "calculate_sum_pi_squared": flag("calculate_sum_pi_squared"),
               "pad_mode": flag("pad_mode", DatasetPadMode.NO_PADDING) != DatasetPadMode.NO_PADDING,
               "ulysses_sp": getattr(engine, "use_ulysses_sp", False),
               "multi_modal_inputs": bool(extract_multi_modal_inputs(data.get("multi_modal_inputs", []))),
               "not nested input_ids": not data["input_ids"].is_nested,
               "3-D position_ids": data["position_ids"].dim() != 2,
               "no prompts/response_mask": not {"prompts", "response_mask"} <= set(data.keys())}
    found = [name for name, present in reasons.items() if present]
    return ", ".join(found) or None


_ANNOUNCED: set[str] = set()


def _announce(message: str) -> None:
    if message not in _ANNOUNCED:
        _ANNOUNCED.add(message)
        logger.warning("SEAL CPU engine: %s", message)


def engine_class():
    """``SharedPrefixEngine``: verl's FSDP language-model engine with the three cuts (module docstring)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    from verl.workers.engine.utils import detach_tree, postprocess_batch_func

    class SharedPrefixEngine(FSDPEngineWithLMHead):
        @property
        def _device(self) -> torch.device:
            return next(self.module.parameters()).device

        def forward_step(self, micro_batch, loss_function, forward_only):
            unhandled = _unhandled(self, micro_batch)
            if unhandled:
                _announce(f"verl's own forward ({unhandled})")
                return super().forward_step(micro_batch, loss_function, forward_only)
            micro_batch = micro_batch.to(self._device)
            autocast_dtype = getattr(self, "_autocast_dtype", torch.bfloat16)
            autocast = (nullcontext() if autocast_dtype == torch.float32
                        else torch.autocast(device_type=self._device.type, dtype=autocast_dtype))
            share = bool(tu.get_non_tensor_data(data=micro_batch, key=PREFIX_FLAG, default=False))
            with autocast:
                model_output = response_log_probs(self.module, micro_batch, share)
                if loss_function is not None:
                    loss, metrics = loss_function(model_output=model_output, data=micro_batch,
                                                  dp_group=self.get_data_parallel_group())
                else:
                    assert forward_only, "forward_only must be True when loss_function is None"
                    loss, metrics = torch.tensor(1.0), {}
            return loss, {"model_output": detach_tree(model_output), "loss": loss.detach().item(), "metrics": metrics}

        def forward_backward_batch(self, data, loss_function, forward_only=False):
            share = bool(tu.get_non_tensor_data(data=data, key=PREFIX_FLAG, default=False))
            skip = bool(tu.get_non_tensor_data(data=data, key=SKIP_FLAG, default=False))
            if forward_only or not (share or skip):
                return super().forward_backward_batch(data, loss_function, forward_only)
            unhandled = _unhandled(self, data) or ", ".join(
                key for key in ("use_dynamic_bsz", "return_model_output")
                if tu.get_non_tensor_data(data=data, key=key, default=key == "use_dynamic_bsz"))
            if unhandled:
                _announce(f"verl's own micro-batches, every row through the model ({unhandled})")
                return super().forward_backward_batch(data, loss_function, forward_only)
            _announce(f"update with shared prompts={share}, zero-advantage rows skipped={skip}")
            # verl's normalisers come from the whole mini-batch, so leaving out zero-gradient rows changes nothing
            tu.assign_non_tensor(data, sp_size=self.ulysses_sequence_parallel_size)
            batch_num_tokens = data["loss_mask"].sum().to(self._device)
            torch.distributed.all_reduce(batch_num_tokens, op=torch.distributed.ReduceOp.SUM,
                                         group=self.get_data_parallel_group())
            tu.assign_non_tensor(data, batch_num_tokens=batch_num_tokens.item(), dp_size=self.get_data_parallel_size())
            skipped = set(zero_advantage_rows(data)) if skip else set()
            # one row is kept even when all are zero: the optimizer then steps on zero gradients, as verl's would
            rows = [r for r in range(len(data)) if r not in skipped] or [0]
            max_rows = int(tu.get_non_tensor_data(data=data, key="micro_batch_size_per_gpu", default=1))
            plan = prompt_grouped_micro_batches(data, rows, max_rows) if share else [
                rows[i:i + max_rows] for i in range(0, len(rows), max_rows)]
            outputs = []
            for i, members in enumerate(plan):
                micro_batch = tu.index_select_tensor_dict(data, members)
                with self._gradient_sync_context(is_last_micro_batch=i == len(plan) - 1):
                    loss, output = self.forward_step(micro_batch, loss_function=loss_function, forward_only=False)
                    scaler = getattr(self, "scaler", None)
                    (scaler.scale(loss) if scaler is not None else loss).backward()
                output.pop("model_output", None)
                outputs.append(output)
            outputs[0]["metrics"] = {**outputs[0]["metrics"], "update_rows": float(len(rows)),
                                     "update_rows_skipped": float(len(data) - len(rows)),
                                     "update_micro_batches": float(len(plan))}
            return postprocess_batch_func(output_lst=outputs, indices=None, data=data)

    return SharedPrefixEngine


def register() -> None:
    """Make verl build ``SharedPrefixEngine`` for language models on the CPU platform (``VERL_ENGINE_DEVICE=cpu``),
    and register ``PACKED_ATTENTION``, which ``cpu_overrides`` names as the actor's attention.

    Called while verl's engine modules may still be importing (the platform is created then), so the engines are
    registered at verl's first engine lookup."""
    from verl.workers.engine.base import EngineRegistry

    register_packed_attention()
    if getattr(EngineRegistry.get_engine_cls, "_seal_cpu", False):
        return
    lookup = EngineRegistry.get_engine_cls.__func__

    def get_engine_cls(cls, model_type: str, backend: str):
        if "cpu" not in cls._engines.get("language_model", {}).get("fsdp2", {}):
            from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithValueHead

            cls.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cpu")(engine_class())
            cls.register(model_type="value_model", backend=["fsdp", "fsdp2"], device="cpu")(FSDPEngineWithValueHead)
        return lookup(cls, model_type, backend)

    get_engine_cls._seal_cpu = True
    EngineRegistry.get_engine_cls = classmethod(get_engine_cls)
