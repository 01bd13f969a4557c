"""Prefix reuse for Hugging Face ``generate()``: a request only prefills what no earlier request computed.

Used by the CPU rollout server of the trainer (``seal_trainer.cpu``) and by ``seal-eval --policy hf``.
"""

from __future__ import annotations

from typing import Any


class PrefixCache:
    """Key/value caches of recent sequences, so a request only prefills what no earlier one computed.

    Multi-turn rollouts re-send the whole conversation at every assistant turn, and the G rollouts of a prompt
    share its long system prompt (the tool schemas): without reuse, prefill dominated generation on CPU. A
    lookup returns a copy of the cache of the stored sequence sharing the longest prefix, cropped to that
    prefix (one token short of the prompt, so generation has an input); entries are evicted least recently used.
    Invalidate on every weight update: the cached keys and values belong to the old weights.
    """

    def __init__(self, max_entries: int = 8):
        self.max_entries = max_entries
        self._entries: list[tuple[list[int], Any]] = []

    def lookup(self, prompt_ids: list[int]) -> tuple[int, Any]:
        """``(reused tokens, cache or None)`` for ``prompt_ids``."""
        import copy

        best, best_len = None, 0
        for i, (tokens, _) in enumerate(self._entries):
            n = _common_prefix(tokens, prompt_ids)
            if n > best_len:
                best, best_len = i, n
        best_len = min(best_len, len(prompt_ids) - 1)
        if best is None or best_len <= 0:
            return 0, None
        tokens, cache = self._entries.pop(best)
        self._entries.append((tokens, cache))  # most recently used last
        reused = copy.deepcopy(cache)
        reused.crop(best_len)
        return best_len, reused

    def store(self, tokens: list[int], cache: Any) -> None:
        if cache is None:
            return
        # a generated sequence ends with a token whose key/value were never computed
        tokens = tokens[: cache.get_seq_length()]
        self._entries = [e for e in self._entries if _common_prefix(e[0], tokens) < len(e[0])]
        self._entries.append((tokens, cache))
        del self._entries[: max(0, len(self._entries) - self.max_entries)]

    def clear(self) -> None:
        self._entries.clear()


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


__all__ = ["PrefixCache"]
