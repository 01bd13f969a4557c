"""Eval-parity fingerprint: one hash of everything a policy was sent, request by request.

A request is the conversation so far (role and content of every message: user turns, the assistant's own raw
messages, tool results) plus the ``tools=`` list, in order. ``seal-eval`` stores each episode's hash and one
for the run; the test suite drives BFCL's own multi-turn inference loop with the same scripted model and
proves its requests hash the same (``tests/test_bfcl_parity.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class RequestLog:
    """Hashes the requests of one episode as they are made.

    A request hashes as the digests of its messages (role and content only: what reaches the model, however a
    client stores ids or names) followed by the digest of its tools. A conversation resends every earlier
    message, so each message's digest is kept (by identity; messages are never edited once sent).
    """

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._messages: dict[int, tuple[dict[str, Any], str]] = {}
        self.count = 0

    def _message_digest(self, message: dict[str, Any]) -> str:
        kept = self._messages.get(id(message))
        if kept is None or kept[0] is not message:
            kept = self._messages[id(message)] = (message, _digest([message["role"], message["content"]]))
        return kept[1]

    def add(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> None:
        parts = [self._message_digest(m) for m in messages] + ["tools", _digest(list(tools))]
        self._hash.update(("\n".join(parts) + "\n\n").encode())
        self.count += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def run_fingerprint(episode_hashes: Iterable[str]) -> str:
    """One hash for a run: its episodes' hashes in task order."""
    return hashlib.sha256("\n".join(episode_hashes).encode()).hexdigest()
