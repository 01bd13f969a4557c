"""Prefix reuse for Hugging Face models: a request only prefills what no earlier request computed.

Used by ``seal_envs.evaluation.batch_generate.BatchGenerator``, the one generator behind the trainer's CPU rollout
server (``seal_trainer.cpu``), ``seal-eval --policy hf`` and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DEFAULT_MAX_BYTES = 2 << 30

# Per model layer, the keys and the values of a sequence as consecutive pieces (1 x kv heads x tokens x dim each,
# in token order): the rows of one batch hold the prefix they share as one piece, referenced by all of them.
Pieces = list[tuple[list[Any], list[Any]]]


class PrefixCache:
    """Key/value caches of recent sequences, bounded by the bytes they hold, least recently used evicted first.

    Multi-turn rollouts re-send the whole conversation at every assistant turn, and the G rollouts of a prompt
    share its long system prompt (the tool schemas): without reuse, prefill dominated generation on CPU. An entry
    is held as pieces (``Pieces``), so the sequences of one batch reference the prefix they share instead of each
    holding a copy (16 rollouts of ~2k tokens that share ~1.4k); ``nbytes`` counts each tensor's storage once. A
    lookup returns views of the stored pieces cropped to the shared prefix (one token short of the prompt, so
    generation has an input): nothing is copied, and the caller must not write into them in place. A sequence
    that extends a stored one replaces it. Invalidate on every weight update: the keys and values belong to the
    old weights.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_bytes = int(max_bytes)
        self._entries: list[tuple[list[int], Pieces]] = []  # most recently used last

    @property
    def nbytes(self) -> int:
        """Bytes of the storages the entries hold, each counted once however many entries share it."""
        storages: dict[int, int] = {}
        for _, pieces in self._entries:
            for keys, values in pieces:
                for tensor in (*keys, *values):
                    storage = tensor.untyped_storage()
                    storages[storage.data_ptr()] = storage.nbytes()
        return sum(storages.values())

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt_ids: list[int]) -> tuple[int, Pieces | None]:
        """``(reused tokens, their pieces or None)`` for ``prompt_ids``."""
        best, best_len = None, 0
        for i, (tokens, _) in enumerate(self._entries):
            n = common_prefix(tokens, prompt_ids)
            if n > best_len:
                best, best_len = i, n
        best_len = min(best_len, len(prompt_ids) - 1)
        if best is None or best_len <= 0:
            return 0, None
        entry = self._entries.pop(best)
        self._entries.append(entry)
        return best_len, [(span_pieces(keys, 0, best_len), span_pieces(values, 0, best_len))
                          for keys, values in entry[1]]

    def store(self, tokens: list[int], pieces: Pieces) -> None:
        """Keep ``pieces`` for ``tokens`` (a sequence's last token may have no keys/values yet: it is left out).
        The pieces are kept as given: pass tensors that hold no more than they show (``compact``)."""
        length = sum(piece.shape[-2] for piece in pieces[0][0]) if pieces else 0
        if not length:
            return
        tokens = list(tokens[:length])
        self._entries = [e for e in self._entries if common_prefix(e[0], tokens) < len(e[0])]
        self._entries.append((tokens, pieces))
        while len(self._entries) > 1 and self.nbytes > self.max_bytes:
            self._entries.pop(0)
        if self.nbytes > self.max_bytes:
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


def span_pieces(pieces: Sequence[Any], start: int, end: int) -> list[Any]:
    """Tokens ``start:end`` of keys (or values) held as consecutive pieces, as views of those pieces."""
    parts, offset = [], 0
    for piece in pieces:
        n = piece.shape[-2]
        a, b = max(start - offset, 0), min(end - offset, n)
        if a < b:
            parts.append(piece if (a, b) == (0, n) else piece[:, :, a:b])
        offset += n
    return parts


def span(pieces: Sequence[Any], start: int, end: int) -> Any:
    """Tokens ``start:end`` of keys (or values) held as consecutive pieces, as one tensor: a view where one piece
    holds them all, else a copy."""
    import torch

    parts = span_pieces(pieces, start, end)
    if not parts:
        return pieces[0][:, :, :0]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)


def compact(tensor: Any) -> Any:
    """``tensor`` itself where it spans its whole storage, else a contiguous copy of only its elements: a view kept
    in the cache would keep all of the tensor it views alive (a batch's buffer, a prefill's whole output)."""
    import torch

    if tensor.is_contiguous() and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size():
        return tensor
    return tensor.clone(memory_format=torch.contiguous_format)


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


__all__ = ["DEFAULT_MAX_BYTES", "Pieces", "PrefixCache", "cache_of", "common_prefix", "compact", "span", "span_pieces"]
