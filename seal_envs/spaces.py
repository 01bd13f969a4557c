"""Gymnasium spaces for chat: actions are free text, observations are tuples of chat messages."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

Message = dict[str, Any]
ROLES = ("system", "user", "assistant", "tool")


class UnicodeText(spaces.Text):
    """``spaces.Text`` that accepts any Unicode string up to ``max_length`` (models emit more than alphanumerics).

    ``sample()`` still draws from the alphanumeric charset, which is enough for env checkers.
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


class ChatMessages(spaces.Space[tuple[Message, ...]]):
    """Tuples of ``{"role": ..., "content": str, ...}`` messages, the observation of a chat environment."""

    def __init__(self, max_messages: int = 64, max_length: int = 1 << 20, seed: int | np.random.Generator | None = None):
        self.max_messages, self.max_length = max_messages, max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return isinstance(x, tuple) and len(x) <= self.max_messages and all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
            and len(m["content"]) <= self.max_length for m in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> tuple[Message, ...]:
        text = spaces.Text(32, seed=int(self.np_random.integers(1 << 31)))
        count = int(self.np_random.integers(1, 4))
        return tuple({"role": ROLES[int(self.np_random.integers(len(ROLES)))], "content": text.sample()}
                     for _ in range(count))

    def __repr__(self) -> str:
        return f"ChatMessages(max_messages={self.max_messages})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ChatMessages) and (other.max_messages, other.max_length) == (self.max_messages, self.max_length)
