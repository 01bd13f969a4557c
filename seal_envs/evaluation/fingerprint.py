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


def canonical_request(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The part of a request that reaches the model, independent of how a client stores ids or names."""
    return {"messages": [{"role": m["role"], "content": m["content"]} for m in messages], "tools": list(tools)}


class RequestLog:
    """Hashes the requests of one episode as they are made."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.count = 0

    def add(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> None:
        line = json.dumps(canonical_request(messages, tools), sort_keys=True, ensure_ascii=False)
        self._hash.update(line.encode() + b"\n")
        self.count += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def run_fingerprint(episode_hashes: Iterable[str]) -> str:
    """One hash for a run: its episodes' hashes in task order."""
    return hashlib.sha256("\n".join(episode_hashes).encode()).hexdigest()
