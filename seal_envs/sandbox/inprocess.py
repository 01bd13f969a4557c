"""In-process sandbox: the tool server's code called directly. No isolation; for debugging only."""

from __future__ import annotations

import json
from typing import Any

from seal_envs.sandbox.base import CallResult, Sandbox, SandboxConfig
from seal_envs.sandbox.server import ToolServer


class InProcessSandbox(Sandbox):
    def __init__(self, config: SandboxConfig | None = None):
        self._server = ToolServer((config or SandboxConfig(backend="inprocess")).max_output_bytes)

    def reset(self, classes: dict[str, Any], python_paths=(), code: str = "") -> None:
        reply = self._server.handle({"op": "reset", "classes": classes, "python_paths": list(python_paths)})
        if not reply["ok"]:
            raise ValueError(f"cannot load the task state: {reply['error']['type']}: {reply['error']['message']}")

    def resolve(self, targets: list[str], python_paths=(), code: str = "") -> dict[str, str]:
        self._server.instances = {}
        reply = self._server.handle({"op": "resolve", "targets": list(targets), "python_paths": list(python_paths)})
        return reply["problems"]

    def call(self, target: str, arguments: dict[str, Any], timeout_s: float | None = None) -> CallResult:
        """No timeout here (nothing can interrupt code in our own process): debugging only."""
        # a JSON copy, as the Docker backend's wire gives: tools may keep and mutate their argument lists
        reply = self._server.handle({"op": "call", "target": target, "arguments": json.loads(json.dumps(arguments))})
        if reply["ok"]:
            return CallResult(ok=True, output=reply["result"], text=reply["text"])
        return CallResult(ok=False, error_type=reply["error"]["type"], error=reply["error"]["message"])

    def snapshot(self) -> dict[str, Any]:
        return self._server.snapshot()

    def close(self) -> None:
        self._server.instances = {}
