"""The tool server that runs inside a sandbox: holds one episode's tool instances and executes calls.

Standard library only, because it runs inside the container image (``python3 server.py`` speaking
JSON lines on stdin/stdout). The in-process backend drives the same ``ToolServer`` class directly, so
both backends execute tools by exactly the same code.

Requests and replies, one JSON object per line:
  {"op": "reset", "classes": {"pkg.mod:Class": state|null}, "python_paths": [...]} -> {"ok": true}
  {"op": "call", "target": "pkg.mod:Class.method", "arguments": {...}}            -> {"ok": true, "result": ...}
  {"op": "snapshot"}                                                               -> {"ok": true, "state": {...}}
  {"op": "ping"}                                                                   -> {"ok": true}
Failures reply {"ok": false, "error": {"type": "ExceptionName", "message": "..."}}.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any

MAX_DEPTH = 32


def to_jsonable(value: Any, depth: int = 0) -> Any:
    """A deterministic JSON view of a tool's state or result (objects become their public fields)."""
    if depth > MAX_DEPTH:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_jsonable(v, depth + 1) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if hasattr(value, "__dict__"):
        fields = {k: to_jsonable(v, depth + 1) for k, v in vars(value).items() if not k.startswith("_")}
        return {"__class__": type(value).__name__, **fields}
    return repr(value)


def public_state(instance: Any) -> dict[str, Any]:
    """The verifier's view of an instance: its public attributes (BFCL's checker uses the same rule)."""
    return {k: to_jsonable(v) for k, v in vars(instance).items() if not k.startswith("_")}


class ToolServer:
    """Executes calls against one episode's tool instances."""

    def __init__(self, max_output_bytes: int = 1 << 16):
        self.max_output_bytes = max_output_bytes
        self.instances: dict[str, Any] = {}

    def reset(self, classes: dict[str, Any], python_paths: list[str] | None = None) -> None:
        for path in python_paths or []:
            if path not in sys.path:
                sys.path.insert(0, path)
        instances = {}
        for class_path, state in classes.items():
            module_name, class_name = class_path.split(":")
            instance = getattr(importlib.import_module(module_name), class_name)()
            if state is not None:
                loader = getattr(instance, "_load_scenario", None)
                if loader is None:
                    raise TypeError(f"{class_path} has no _load_scenario(state) method to load its initial state")
                loader(json.loads(json.dumps(state)))  # a private copy: tools may mutate it
            instances[class_path] = instance
        self.instances = instances

    def call(self, target: str, arguments: dict[str, Any]) -> Any:
        class_path, method = target.rsplit(".", 1)
        if class_path not in self.instances:
            raise LookupError(f"{class_path} is not loaded in this episode")
        result = to_jsonable(getattr(self.instances[class_path], method)(**arguments))
        text = json.dumps(result)
        if len(text) > self.max_output_bytes:
            return {"truncated_output": text[: self.max_output_bytes],
                    "note": f"output truncated at {self.max_output_bytes} of {len(text)} bytes"}
        return result

    def snapshot(self) -> dict[str, Any]:
        return {path: public_state(instance) for path, instance in self.instances.items()}

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one request; exceptions of the tool become error replies, never escape."""
        try:
            op = request.get("op")
            if op == "call":
                return {"ok": True, "result": self.call(request["target"], request.get("arguments") or {})}
            if op == "snapshot":
                return {"ok": True, "state": self.snapshot()}
            if op == "reset":
                self.reset(request["classes"], request.get("python_paths"))
                return {"ok": True}
            if op == "ping":
                return {"ok": True}
            return {"ok": False, "error": {"type": "ProtocolError", "message": f"unknown op {op!r}"}}
        except Exception as exc:  # the tool's own failure is data for the diagnosis
            return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc),
                                           "traceback": traceback.format_exc(limit=-3)}}


def serve(stdin=None, stdout=None, max_output_bytes: int = 1 << 16) -> None:
    """Serve JSON lines until stdin closes."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    sys.stdout = sys.stderr  # a tool that prints must not corrupt the reply channel
    server = ToolServer(max_output_bytes)
    for line in stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as exc:
            reply = {"ok": False, "error": {"type": "ProtocolError", "message": f"bad request: {exc}"}}
        else:
            reply = server.handle(request)
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


if __name__ == "__main__":
    serve(max_output_bytes=int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 16)
