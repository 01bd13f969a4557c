"""Prefix reuse for Hugging Face models: a request only prefills what no earlier request computed.

Used by ``seal_envs.evaluation.batch_generate.BatchGenerator``, the one generator behind the trainer's CPU rollout
server (``seal_trainer.cpu``), ``seal-eval --policy hf`` and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DEFAULT_MAX_BYTES = 2 << 30


class PrefixCache:
    """Key/value caches of recent sequences, bounded by the bytes they hold, least recently used evicted first.

    Multi-turn rollouts re-send the whole conversation at every assistant turn, and the G rollouts of a prompt
    share its long system prompt (the tool schemas): without reuse, prefill dominated generation on CPU. A
    lookup returns a cache whose layers are *views* of the stored entry cropped to the shared prefix (one token
    short of the prompt, so generation has an input): nothing is copied, and the caller must not write into it
    in place (``DynamicCache`` appends by concatenation, which leaves the entry intact). A sequence that extends
    a stored one replaces it. Invalidate on every weight update: the keys and values belong to the old weights.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_bytes = int(max_bytes)
        self._entries: list[tuple[list[int], Any, int]] = []  # tokens, cache, bytes; most recently used last

    @property
    def nbytes(self) -> int:
        return sum(size for _, _, size in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt_ids: list[int]) -> tuple[int, Any]:
        """``(reused tokens, cache or None)`` for ``prompt_ids``."""
        best, best_len = None, 0
        for i, (tokens, _, _) in enumerate(self._entries):
            n = common_prefix(tokens, prompt_ids)
            if n > best_len:
                best, best_len = i, n
        best_len = min(best_len, len(prompt_ids) - 1)
        if best is None or best_len <= 0:
            return 0, None
        entry = self._entries.pop(best)
        self._entries.append(entry)
        return best_len, _cropped_view(entry[1], best_len)

    def store(self, tokens: list[int], cache: Any) -> None:
        if cache is None:
            return
        # a generated sequence ends with a token whose key/value were never computed
        tokens = list(tokens[: cache.get_seq_length()])
        self._entries = [e for e in self._entries if common_prefix(e[0], tokens) < len(e[0])]
        self._entries.append((tokens, cache, _cache_bytes(cache)))
        while len(self._entries) > 1 and self.nbytes > self.max_bytes:
            self._entries.pop(0)
        if self._entries and self._entries[0][2] > self.max_bytes:
            self._entries.clear()

    def clear(self) -> None:
        self._entries.clear()


def cache_of(layers: list[tuple[Any, Any]]) -> Any:
    """A ``DynamicCache`` holding these (keys, values) tensors themselves (its constructor would copy them)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache()
    cache.layers = []
    for keys, values in layers:
        layer = DynamicLayer()
        layer.keys, layer.values, layer.dtype, layer.device, layer.is_initialized = (
            keys, values, keys.dtype, keys.device, True)
        cache.layers.append(layer)
    return cache


def _cropped_view(cache: Any, length: int) -> Any:
    return cache_of([(layer.keys[:, :, :length], layer.values[:, :, :length]) for layer in cache.layers])


def _cache_bytes(cache: Any) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]: bisect on slice equality (C speed)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


__all__ = ["DEFAULT_MAX_BYTES", "PrefixCache", "cache_of", "common_prefix"]
