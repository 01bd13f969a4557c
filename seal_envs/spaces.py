"""Gymnasium spaces for chat: actions are free text, observations are tuples of chat messages.

``ChatMessages`` is registered with Gymnasium's shared-memory functions, so ``AsyncVectorEnv`` (and
``gym.make_vec(..., vectorization_mode="async")``) works with its default ``shared_memory=True``.
"""

from __future__ import annotations

import copy
import multiprocessing as mp
from collections.abc import Sequence
from queue import Empty
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

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


class ChatMailboxes:
    """What ``AsyncVectorEnv`` shares for a ``ChatMessages`` observation.

    Chat has no fixed size, so no fixed buffer fits it: each worker posts its observation to its own queue,
    then counts the post in shared memory (before it answers the step, so the parent sees the count first).
    A post arrives while its worker lives; one whose worker exited first never does.
    """

    ARRIVAL_TIMEOUT_S = 60.0

    def __init__(self, n: int, ctx: ModuleType) -> None:
        self.queues = tuple(ctx.Queue() for _ in range(n))
        self.posted = ctx.Array("q", n)

    def post(self, index: int, observation: tuple[Message, ...]) -> None:
        queue = self.queues[index]
        queue.cancel_join_thread()  # a worker that exits never waits for the parent to read
        queue.put(observation)
        with self.posted.get_lock():
            self.posted[index] += 1


class ChatBatch(Sequence):
    """The parent's live view of the mailboxes: ``batch[i]`` is env ``i``'s latest observation.

    ``AsyncVectorEnv`` returns ``deepcopy`` of it (a plain tuple of observations, as ``SyncVectorEnv`` does),
    or the view itself with ``copy=False``.
    """

    def __init__(self, boxes: ChatMailboxes) -> None:
        self._boxes = boxes
        self._latest: list[tuple[Message, ...]] = [()] * len(boxes.queues)
        self._taken = [0] * len(boxes.queues)

    def _refresh(self) -> None:
        for i, queue in enumerate(self._boxes.queues):
            while self._taken[i] < self._boxes.posted[i]:
                try:
                    self._latest[i] = queue.get(timeout=ChatMailboxes.ARRIVAL_TIMEOUT_S)
                except Empty:
                    raise RuntimeError(f"the observation of sub-env {i} never arrived: its worker exited "
                                       "(read observations before closing the vector env)") from None
                self._taken[i] += 1

    def __getitem__(self, index):  # type: ignore[override]
        self._refresh()
        return tuple(self._latest)[index]

    def __len__(self) -> int:
        return len(self._latest)

    def __deepcopy__(self, memo: dict) -> tuple[tuple[Message, ...], ...]:
        self._refresh()
        return copy.deepcopy(tuple(self._latest), memo)


@create_shared_memory.register(ChatMessages)
def _create_chat_mailboxes(space: ChatMessages, n: int = 1, ctx: ModuleType = mp) -> ChatMailboxes:
    return ChatMailboxes(n, ctx)


@read_from_shared_memory.register(ChatMessages)
def _read_chat_mailboxes(space: ChatMessages, shared_memory: ChatMailboxes, n: int = 1) -> ChatBatch:
    return ChatBatch(shared_memory)


@write_to_shared_memory.register(ChatMessages)
def _write_chat_mailbox(space: ChatMessages, index: int, value: tuple[Message, ...],
                        shared_memory: ChatMailboxes) -> None:
    shared_memory.post(index, value)
