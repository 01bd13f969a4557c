"""The tool server that runs inside a sandbox: holds one episode's tool instances and executes calls.

Standard library only, because it runs inside the container image (``python3 server.py`` speaking
JSON lines on stdin/stdout). The in-process backend drives the same ``ToolServer`` class directly, so
both backends execute tools by exactly the same code.

Requests and replies, one JSON object per line:
  {"op": "reset", "classes": {"pkg.mod:Class": state|null}, "python_paths": [...]} -> {"ok": true}
  {"op": "call", "target": "pkg.mod:Class.method", "arguments": {...}}  -> {"ok": true, "result": ..., "text": "..."}
  {"op": "snapshot"}                                                               -> {"ok": true, "state": {...}}
  {"op": "ping"}                                                                   -> {"ok": true}
Failures reply {"ok": false, "error": {"type": "ExceptionName", "message": "..."}}.

A call's ``result`` is the JSON view of what the tool returned; ``text`` is the return value as Python words it
(``result_text``), taken at call time: a benchmark that compares tool outputs as text (BFCL) compares that.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any

MAX_DEPTH = 32


def state_key(key: Any) -> str:
    """A dict key as a JSON key that keeps Python's ``==`` between keys: ``{0.0: x} == {0: x} == {False: x}``.

    Strings stay as they are; numbers become ``#`` and their value (integral values as ints); other keys ``#`` and
    their repr.
    """
    if isinstance(key, str):
        return key
    if isinstance(key, (bool, int, float)) and float(key).is_integer():
        return f"#{int(key)}"
    return f"#{key!r}"


def result_text(value: Any) -> str:
    """A return value in words: a string as it is, a dict as JSON when it serialises, anything else ``str()``."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:  # a value JSON cannot write (e.g. an mpmath number): Python's own words
            return str(value)
    return str(value)


def to_jsonable(value: Any, depth: int = 0) -> Any:
    """A deterministic JSON view of a tool's state or result (objects become their public fields)."""
    if depth > MAX_DEPTH:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {state_key(k): to_jsonable(v, depth + 1) for k, v in value.items()}
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

    def call(self, target: str, arguments: dict[str, Any]) -> tuple[Any, str]:
        """The call's result (JSON view) and its ``result_text``."""
        class_path, method = target.rsplit(".", 1)
        if class_path not in self.instances:
            raise LookupError(f"{class_path} is not loaded in this episode")
        value = getattr(self.instances[class_path], method)(**arguments)
        result, text = to_jsonable(value), result_text(value)
        encoded = json.dumps(result)
        if max(len(encoded), len(text)) > self.max_output_bytes:
            result = {"truncated_output": encoded[: self.max_output_bytes],
                      "note": f"output truncated at {self.max_output_bytes} of {len(encoded)} bytes"}
            return result, json.dumps(result)
        return result, text

    def snapshot(self) -> dict[str, Any]:
        return {path: public_state(instance) for path, instance in self.instances.items()}

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one request; exceptions of the tool become error replies, never escape."""
        try:
            op = request.get("op")
            if op == "call":
                result, text = self.call(request["target"], request.get("arguments") or {})
                return {"ok": True, "result": result, "text": text}
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
