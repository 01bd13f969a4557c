"""Check an MCP domain's server against its ``tools.json`` before any episode runs.

The server is started where it always runs (inside a sandbox, never in the host process), asked for
``tools/list``, and its answer is checked as data on the host: every tool the server lists must be a valid SEAL
tool (the meta-schema's rules, e.g. a JSON-Schema object as ``inputSchema``), and every tool the spec declares
must be listed with exactly the parameters the spec shows the policy. Problems come back as ``SpecError``s
naming the tool and the field, through ``seal_envs.resolve`` (so ``gym.make`` and ``seal-envs validate`` report
them like any unresolved implementation).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from seal_envs.sandbox import SandboxConfig, SandboxError, get_pool
from seal_envs.spec.loader import (DOMAIN_FILE, MCP_BRIDGE, MCP_BRIDGE_MODULE, SpecError, ToolDomain, check_tool,
                                   read_json, resolve_file, validate_document)

_cache: dict[tuple, list[SpecError]] = {}
_cache_lock = threading.Lock()


def listed_tools(domain: ToolDomain, config: SandboxConfig, python_paths: tuple[str, ...] | None = None,
                 code: str | None = None) -> list[dict[str, Any]]:
    """The server's ``tools/list`` (JSON), from a fresh server in a sandbox of ``config``. Raises ``ValueError``
    when the server does not start or answer (the message says why), ``SandboxError`` when no sandbox runs."""
    python_paths = tuple(str(p) for p in domain.python_paths) if python_paths is None else python_paths
    class_path = f"{MCP_BRIDGE_MODULE}:{domain.name}"
    pool = get_pool(config)
    sandbox = pool.acquire()
    try:
        sandbox.reset({class_path: None}, python_paths, domain.code_hash() if code is None else code)
        result = sandbox.call(f"{class_path}._seal_list_tools", {})
    except SandboxError:
        pool.discard(sandbox)
        raise
    except ValueError as exc:
        pool.release(sandbox)
        raise ValueError(f"the MCP server does not start: {exc}") from None
    pool.release(sandbox)
    if result.infrastructure:
        raise SandboxError(f"the sandbox failed while listing the MCP server's tools: {result.error}")
    if not result.ok:
        raise ValueError(f"tools/list failed: {result.error_type}: {result.error}")
    if not isinstance(result.output, list):
        raise ValueError(f"tools/list gave no list of tools (over max_output_bytes?): {str(result.output)[:300]}")
    return result.output


def as_spec_tool(listed: dict[str, Any]) -> dict[str, Any]:
    """A ``tools/list`` entry as a ``tools.json`` tool: its ``inputSchema`` as parameters, read-only tools
    (``annotations.readOnlyHint``) as ``mutates_state: false``."""
    tool = {"name": listed.get("name"), "description": listed.get("description") or listed.get("title") or "",
            "parameters": listed.get("inputSchema")}
    if (listed.get("annotations") or {}).get("readOnlyHint"):
        tool["mutates_state"] = False
    return tool


def _first_difference(server: Any, spec: Any, path: str = "") -> tuple[str, Any, Any] | None:
    if isinstance(server, dict) and isinstance(spec, dict):
        for key in sorted(set(server) | set(spec)):
            found = _first_difference(server.get(key, "<absent>"), spec.get(key, "<absent>"), f"{path}.{key}")
            if found:
                return found
        return None
    return None if server == spec else (path, server, spec)


def server_tool_problems(domain: ToolDomain, listed: list[Any]) -> list[SpecError]:
    """What is wrong with the server's tools, as errors on the spec file naming the tool and the field."""
    file = domain.root / DOMAIN_FILE
    problems: list[SpecError] = []
    by_name: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(listed):
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"the MCP server's tools/list[{i}] ({name!r})"
        tool = as_spec_tool(entry) if isinstance(entry, dict) else entry
        try:
            validate_document({"domain": domain.name, "description": "-", "tools": [tool]}, "meta_schema.json", file)
            check_tool(tool, 0, file)
        except SpecError as exc:
            field = exc.json_path.replace("$.tools[0]", "").lstrip(".") or "the tool"
            problems.append(SpecError(file, "$.mcp", f"{where}: {field}: {exc.problem}"))
            continue
        by_name[name] = tool
    for i, tool in enumerate(domain.tools):
        served = by_name.get(tool.name)
        if served is None:
            if not any(isinstance(e, dict) and e.get("name") == tool.name for e in listed):
                problems.append(SpecError(file, f"$.tools[{i}].name", f"the MCP server lists no tool {tool.name!r} "
                                          f"(it lists {sorted(by_name) or 'none'})"))
            continue
        difference = _first_difference(served["parameters"], tool.parameters)
        if difference:
            path, said, declared = difference
            problems.append(SpecError(file, f"$.tools[{i}].parameters{path}", f"tool {tool.name!r}: the MCP server's "
                                      f"inputSchema has {said!r}, tools.json {declared!r}"))
    return problems


def mcp_tool_problems(domain: ToolDomain, config: SandboxConfig, python_paths: tuple[str, ...],
                      code: str) -> list[SpecError]:
    """``server_tool_problems`` of a fresh server, or why none answered; cached per backend and domain code."""
    key = (config.backend, config.image, domain.name, code, python_paths)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    try:
        problems = server_tool_problems(domain, listed_tools(domain, config, python_paths, code))
    except ValueError as exc:
        problems = [SpecError(domain.root / DOMAIN_FILE, "$.mcp", str(exc))]
    with _cache_lock:
        _cache[key] = problems
    return problems


def spec_from_server(folder: str | Path, config: SandboxConfig) -> dict[str, Any]:
    """The folder's ``tools.json`` with its ``tools`` replaced by what its MCP server lists (``seal-envs
    mcp-tools``): the spec then shows the policy exactly the server's schemas. Edit descriptions or drop tools
    afterwards; parameters must stay the server's."""
    file = resolve_file(folder, DOMAIN_FILE)
    document = read_json(file)
    placeholder = {"name": "placeholder", "description": "-", "parameters": {"type": "object", "properties": {}}}
    validate_document({**document, "tools": [placeholder]}, "meta_schema.json", file)
    if "mcp" not in document:
        raise SpecError(file, "$", "declares no 'mcp' server")
    domain = ToolDomain(document["domain"], document["description"], (), file.parent,
                        (MCP_BRIDGE, file.parent), mcp=document["mcp"])
    listed = listed_tools(domain, config)
    problems = server_tool_problems(domain, listed)
    if problems:
        raise ValueError("\n".join(map(str, problems)))
    return {**document, "tools": [as_spec_tool(t) for t in listed]}


def write_spec_from_server(folder: str | Path, config: SandboxConfig) -> Path:
    file = resolve_file(folder, DOMAIN_FILE)
    file.write_text(json.dumps(spec_from_server(folder, config), indent=1) + "\n")
    return file
