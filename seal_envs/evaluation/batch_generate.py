"""Batched generation for many conversations at once, with key/value reuse across requests.

On CPU one sequence at a time leaves most of the arithmetic units idle while decoding (each step reads all the
weights for one token), and re-prefilling the ~1.6k-token tool prompt at every assistant message dominated the
time. ``BatchGenerator`` therefore:

1. prefills, once per distinct prompt, only the tokens no earlier request computed (``PrefixCache``: the G
   samples of a task share their first prompt, and every later prompt extends the conversation's own
   previous sequence), one prompt at a time (prefill of many tokens is compute-bound already);
2. stitches those per-prompt caches, left-padded, into one batched cache and decodes all prompts in a single
   ``model.generate`` call (positions follow the attention mask, so padding never shifts a sequence);
3. stores each row's keys/values for the next request of its conversation.

Two CPU costs of transformers' defaults are avoided during the batched decode: its sdpa attention copies every
key/value head across its query group whenever a padding mask is passed (``GROUPED_SDPA`` shares them), and its
``DynamicCache`` copies the whole cache at every step to append one token (``_ReservedLayer`` writes in place).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seal_envs.formats import DEFAULT_TOOL_FORMAT
from seal_envs.prefix_cache import PrefixCache

GROUPED_SDPA = "seal_grouped_sdpa"


def _grouped_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                  is_causal: bool | None = None, **kwargs):
    """transformers' sdpa attention, with grouped-query heads shared (``enable_gqa``) even under a mask."""
    import torch

    causal = query.shape[2] > 1 and attention_mask is None and (
        is_causal if is_causal is not None else getattr(module, "is_causal", True))
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, is_causal=causal,
                                                           enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


def _register_grouped_sdpa() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, _grouped_sdpa)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)


@functools.cache
def _reserved_layer_class():
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys/values are views of a buffer with room for the tokens to come."""

        def update(self, key_states, value_states, *args, **kwargs):
            import torch

            end = self.length + key_states.shape[-2]
            if end > self.buffer[0].shape[-2]:  # out of room: grow as DynamicLayer does
                self.buffer = tuple(torch.cat([b[:, :, :self.length], s], dim=-2)
                                    for b, s in zip(self.buffer, (key_states, value_states)))
            else:
                self.buffer[0][:, :, self.length:end] = key_states
                self.buffer[1][:, :, self.length:end] = value_states
            self.length = end
            self.keys, self.values = self.buffer[0][:, :, :end], self.buffer[1][:, :, :end]
            return self.keys, self.values

    return ReservedLayer


def _reserved_layer(keys: Sequence[Any], values: Sequence[Any], reserve: int):
    """One layer of batch-1 caches of different lengths, left-padded with zeros to the longest, with room for
    ``reserve`` more tokens, so that appending a token writes in place instead of copying the cache."""
    lengths = [k.shape[-2] for k in keys]
    width = max(lengths)
    layer = _reserved_layer_class()()
    layer.dtype, layer.device, layer.is_initialized, layer.length = keys[0].dtype, keys[0].device, True, width
    layer.buffer = tuple(parts[0].new_empty((len(parts), parts[0].shape[1], width + reserve, parts[0].shape[-1]))
                         for parts in (keys, values))
    for buffer, parts in zip(layer.buffer, (keys, values)):
        for row, (part, n) in enumerate(zip(parts, lengths)):
            buffer[row, :, : width - n] = 0
            buffer[row, :, width - n: width] = part[0]
    layer.keys, layer.values = layer.buffer[0][:, :, :width], layer.buffer[1][:, :, :width]
    return layer


@dataclass(frozen=True)
class Sampling:
    """How tokens are picked. ``temperature`` 0 is greedy; ``seed`` makes sampled runs reproducible."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def generate_kwargs(self) -> dict[str, Any]:
        if self.temperature > 0:
            return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": None}
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}


@dataclass(frozen=True)
class Generation:
    """One prompt's continuation: its new tokens (trailing eos/pad stripped) and whether it ended by itself."""

    tokens: list[int]
    finished: bool


class BatchGenerator:
    """Continue many token prompts in one ``generate`` call, reusing keys/values of earlier requests.

    ``max_cached`` bounds the stored caches (least recently used go first); size it above the number of
    conversations played at once, or each request re-prefills its conversation.
    """

    def __init__(self, model, eos_ids: Sequence[int], pad_id: int, max_cached: int = 40):
        self.model = model
        self.eos_ids = [int(i) for i in eos_ids]
        self.pad_id = int(pad_id)
        self.cache = PrefixCache(max_entries=max_cached)
        self.prefill_tokens = self.reused_tokens = self.generated_tokens = 0

    def _prefilled(self, prompt: list[int]):
        """A batch-1 cache holding the keys/values of ``prompt[:-1]`` (the last token is fed by ``generate``)."""
        import torch

        reused, cache = self.cache.lookup(prompt)
        self.reused_tokens += reused
        if reused < len(prompt) - 1:
            rest = torch.tensor([prompt[reused:-1]], dtype=torch.long)
            self.prefill_tokens += rest.shape[1]
            with torch.no_grad():
                cache = self.model(input_ids=rest, past_key_values=cache, use_cache=True).past_key_values
            self.cache.store(prompt[:-1], cache)
        return cache

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: Sequence[int], sampling: Sampling,
                 step: int = 0) -> list[Generation]:
        """Continue every prompt (at least 2 tokens each) by at most its ``max_new_tokens``; ``step`` salts the seed."""
        import torch
        from transformers import DynamicCache

        prompts = [list(p) for p in prompts]
        if any(len(p) < 2 for p in prompts):
            raise ValueError("each prompt needs at least 2 tokens")
        distinct = {tuple(p): None for p in prompts}
        caches = {key: self._prefilled(list(key)) for key in distinct}
        width = max(len(p) for p in prompts)
        pads = [width - len(p) for p in prompts]
        ids = torch.tensor([[self.pad_id] * n + p for n, p in zip(pads, prompts)], dtype=torch.long)
        mask = torch.tensor([[0] * n + [1] * len(p) for n, p in zip(pads, prompts)], dtype=torch.long)
        rows = [caches[tuple(p)] for p in prompts]
        batched = DynamicCache()
        batched.layers = [_reserved_layer([r.layers[i].keys for r in rows], [r.layers[i].values for r in rows],
                                          max(max_new_tokens))
                          for i in range(len(rows[0].layers))]
        del caches, rows
        torch.manual_seed(sampling.seed * 1_000_003 + step)
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask, past_key_values=batched,
                                      max_new_tokens=max(max_new_tokens), eos_token_id=self.eos_ids or None,
                                      pad_token_id=self.pad_id, return_dict_in_generate=True,
                                      **sampling.generate_kwargs())
        results = []
        stop = set(self.eos_ids) | {self.pad_id}
        for row, (n, limit) in enumerate(zip(pads, max_new_tokens)):
            new = out.sequences[row, width:].tolist()[:limit]
            finished = any(t in self.eos_ids for t in new)
            if finished:
                new = new[: min(new.index(t) for t in self.eos_ids if t in new) + 1]
            self._store_row(out, row, n, width + len(new))
            self.generated_tokens += len(new)
            while new and new[-1] in stop:
                new.pop()
            results.append(Generation(new, finished))
        return results

    def _store_row(self, out, row: int, pad: int, end: int) -> None:
        """Keep the keys/values of one row's real tokens (padding and what followed its eos left out)."""
        from transformers import DynamicCache

        layers = [(layer.keys[row:row + 1, :, pad:end].clone(), layer.values[row:row + 1, :, pad:end].clone())
                  for layer in out.past_key_values.layers]
        self.cache.store(out.sequences[row, pad:end].tolist(), DynamicCache(layers))

    def clear(self) -> None:
        """Forget stored keys/values (after a weight update they belong to the old weights)."""
        self.cache.clear()


def load_generator(model_path: str, max_cached: int = 40,
                   tool_format: str = DEFAULT_TOOL_FORMAT) -> tuple[Any, BatchGenerator]:
    """The tokenizer (rendering tools in ``tool_format``, see ``seal_envs.tool_template``) and a CPU generator for a
    model folder; the envs the episodes play must use the same ``tool_format``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seal_envs.tool_template import ensure_tool_template

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    ensure_tool_template(tokenizer, str(model_path), tool_format)
    _register_grouped_sdpa()
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                 attn_implementation=GROUPED_SDPA).eval()
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [tokenizer.eos_token_id])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    return tokenizer, BatchGenerator(model, eos_ids, pad, max_cached)


__all__ = ["BatchGenerator", "Generation", "Sampling", "load_generator"]
