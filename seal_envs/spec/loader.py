"""Load and validate tool-domain JSON files."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass, field
from functools import cache, wraps
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

BUNDLED_SPECS = Path(str(resources.files("tool_specs")))
"""Directory of the tool domains shipped with the package (``tool_specs/``)."""

DOMAIN_FILE = "tools.json"
MCP_BRIDGE = (Path(__file__).parent.parent / "mcp" / "sandboxed").resolve()
"""Folder of ``seal_mcp_bridge``, the module that runs an MCP domain's server inside the sandbox."""
MCP_BRIDGE_MODULE = "seal_mcp_bridge"


class SpecError(ValueError):
    """A tool spec (or task file) does not satisfy its schema; the message says where and why."""

    def __init__(self, file: str | Path, json_path: str, problem: str):
        self.file, self.json_path, self.problem = str(file), json_path, problem
        super().__init__(f"{file}: at {json_path}: {problem}")


@dataclass(frozen=True)
class ToolSpec:
    """One callable tool, as the policy sees it (name, description, JSON Schema parameters)."""

    name: str
    description: str
    parameters: dict[str, Any]
    implementation: str  # "package.module:Class.method"
    mutates_state: bool = True
    returns: dict[str, Any] | None = None  # JSON Schema of the result, shown to the policy as "response"

    @property
    def class_path(self) -> str:
        """``package.module:Class``: the sandbox keeps one instance of it per episode."""
        return self.implementation.rsplit(".", 1)[0]

    @property
    def method(self) -> str:
        return self.implementation.rsplit(".", 1)[1]

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(self.parameters.get("required", ()))

    def openai_schema(self) -> dict[str, Any]:
        """The tool in the OpenAI/Hugging Face ``tools=`` format that chat templates render."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        if self.returns is not None:
            function["response"] = self.returns
        return {"type": "function", "function": function}


ALL_TASKS = "all"  # the one split of a domain without task_splits: its whole tasks.json


@dataclass(frozen=True)
class ToolDomain:
    """A named set of tools plus the directory they were loaded from."""

    name: str
    description: str
    tools: tuple[ToolSpec, ...]
    root: Path
    python_paths: tuple[Path, ...] = field(default=())
    task_splits: str | None = None  # "module:function", module a .py file under the domain's folder
    mcp: dict[str, Any] | None = None  # the MCP server that implements the tools (tools.json's "mcp" block)

    def split_tasks(self, split: str) -> tuple:
        """The tasks of the domain's own fixed ``split`` (``"train"`` / ``"eval"``), for domains that declare one;
        a domain with only a ``tasks.json`` has one split, ``"all"``: every task in it.

        The module is looked up only in the domain's own folder (a spec is data: it must not be able to make
        the host call an arbitrary importable function such as ``os:system``)."""
        if not self.task_splits:
            if split == ALL_TASKS:
                from seal_envs.task import load_tasks

                return tuple(load_tasks(self.root))
            raise ValueError(f"domain {self.name!r} has no split {split!r}: it declares no task_splits, so its tasks are "
                             f"the one split {ALL_TASKS!r} ({self.root / 'tasks.json'}); ask for {ALL_TASKS!r} (or no "
                             "split), or declare \"task_splits\": \"module:function\" in its tools.json "
                             "(docs/domains.md)")
        module, function = self.task_splits.split(":")
        source = (self.root / Path(*module.split("."))).with_suffix(".py")
        if not source.is_file():
            raise ValueError(f"domain {self.name!r}: task_splits module {module!r} must be a file of the domain's "
                             f"folder, but {source} does not exist")
        spec = importlib.util.spec_from_file_location(f"_seal_splits_{self.name}_{module}", source)
        namespace = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(namespace)
        return tuple(getattr(namespace, function)(split))

    def code_hash(self) -> str:
        """Identifies the code the sandbox runs for this domain: the spec, every Python file under its python
        paths and the source of implementation modules found elsewhere. Sandboxes import changed code afresh
        and reference replays are cached under it."""
        digest = hashlib.sha256((self.root / DOMAIN_FILE).read_bytes() if (self.root / DOMAIN_FILE).is_file() else b"")
        for path in self.python_paths:
            for source in sorted(path.rglob("*.py")):
                digest.update(str(source.relative_to(path)).encode() + b"\0" + source.read_bytes())
        for module in sorted({t.class_path.split(":")[0] for t in self.tools}):
            origin = _module_origin(module, self.python_paths)
            if origin is not None:
                digest.update(module.encode() + b"\0" + origin.read_bytes())
        return digest.hexdigest()[:16]

    def tool(self, name: str) -> ToolSpec:
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(f"domain {self.name!r} has no tool {name!r}; tools: {', '.join(self.tool_names)}")

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)


@cache
def _validator(schema_name: str) -> jsonschema.protocols.Validator:
    schema = json.loads(resources.files("seal_envs.spec").joinpath(schema_name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _module_origin(module: str, python_paths: tuple[Path, ...]) -> Path | None:
    """The source file of an implementation module outside the domain's python paths (e.g. an installed
    package), without importing the module itself; None when it lives under them or cannot be found."""
    if any((path / Path(*module.split("."))).with_suffix(".py").is_file() or (path / module.split(".")[0]).is_dir()
           for path in python_paths):
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin and os.path.isfile(spec.origin) else None


def _python_paths(document: dict[str, Any], root: Path, file: Path) -> tuple[Path, ...]:
    """The spec's python paths, each a folder inside the domain's own folder (nothing else is mounted)."""
    paths = []
    for i, entry in enumerate(document.get("python_paths", [])):
        path = (root / entry).resolve()
        if path != root.resolve() and root.resolve() not in path.parents:
            raise SpecError(file, f"$.python_paths[{i}]", f"{entry!r} leaves the domain's folder {root}; python "
                            "paths must be folders inside it (move the code there, or install it as a package)")
        if not path.is_dir():
            raise SpecError(file, f"$.python_paths[{i}]", f"{entry!r} is not a folder ({path})")
        paths.append(path)
    return tuple(paths)


def _json_path(path: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def validate_document(document: Any, schema_name: str, file: str | Path) -> None:
    """Validate ``document`` against one of our shipped schemas; raise the most relevant error."""
    try:
        error = jsonschema.exceptions.best_match(_validator(schema_name).iter_errors(document))
    except RecursionError:
        raise SpecError(file, "$", "nested too deeply to validate") from None
    if error is not None:
        raise SpecError(file, _json_path(error.absolute_path), error.message)


def read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text())
    except FileNotFoundError:
        raise SpecError(file, "$", "file not found") from None
    except json.JSONDecodeError as exc:
        raise SpecError(file, "$", f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise SpecError(file, "$", "nested too deeply to read (Python's recursion limit)") from None


def check_tool(tool: dict[str, Any], index: int, file: Path) -> None:
    where = f"$.tools[{index}]"
    params = tool["parameters"]
    try:
        jsonschema.Draft202012Validator.check_schema(params)
    except jsonschema.SchemaError as exc:
        raise SpecError(file, f"{where}.parameters{_json_path(exc.path)[1:]}", f"not a valid JSON Schema: {exc.message}") from None
    unknown = [r for r in params.get("required", []) if r not in params["properties"]]
    if unknown:
        raise SpecError(file, f"{where}.parameters.required", f"names {unknown} that are not in 'properties'")


def _implementation(tool: dict[str, Any], index: int, document: dict[str, Any], file: Path) -> str:
    """The tool's ``implementation``; an MCP domain's tools are methods of the bridge's class for the domain."""
    where = f"$.tools[{index}]"
    if "mcp" not in document:
        if "implementation" not in tool:
            raise SpecError(file, where, "'implementation' is a required property (or declare the domain's MCP "
                            "server in 'mcp')")
        return tool["implementation"]
    if "implementation" in tool:
        raise SpecError(file, f"{where}.implementation", "an MCP domain's tools are implemented by its server "
                        "('mcp'); remove 'implementation'")
    if "." in tool["name"]:
        raise SpecError(file, f"{where}.name", f"MCP tool names cannot contain '.' ({tool['name']!r})")
    return f"{MCP_BRIDGE_MODULE}:{document['domain']}.{tool['name']}"


def resolve_file(path: str | Path, default_name: str) -> Path:
    """A directory means its ``default_name`` file; a bare name that is not a path means a bundled domain."""
    path = Path(path)
    if not path.exists() and not path.is_absolute() and len(path.parts) == 1:
        path = BUNDLED_SPECS / path
    return (path / default_name if path.is_dir() else path).resolve()


def cached_by_file(default_name: str):
    """Decorate ``load(file)``: parse each file once per process (hundreds of envs share it), again if it changes."""

    def decorate(load):
        cached = cache(lambda file, mtime: load(file))

        @wraps(load)
        def wrapper(path: str | Path):
            file = resolve_file(path, default_name)
            return cached(file, file.stat().st_mtime_ns if file.exists() else None)

        return wrapper

    return decorate


@cached_by_file(DOMAIN_FILE)
def load_domain(file: Path) -> ToolDomain:
    """Load a domain from a directory holding ``tools.json`` (or from the JSON file itself).

    A bare name such as ``"shop"`` refers to a bundled domain under ``tool_specs/``.
    """
    document = read_json(file)
    validate_document(document, "meta_schema.json", file)
    names: set[str] = set()
    for i, tool in enumerate(document["tools"]):
        check_tool(tool, i, file)
        if tool["name"] in names:
            raise SpecError(file, f"$.tools[{i}].name", f"duplicate tool name {tool['name']!r}")
        names.add(tool["name"])
    root = file.parent
    python_paths = _python_paths(document, root, file)
    if "mcp" in document:  # the bridge, and the domain's folder: the bridge reads the server's command there
        python_paths += tuple(p for p in (MCP_BRIDGE, root) if p not in python_paths)
    return ToolDomain(
        name=document["domain"],
        description=document["description"],
        tools=tuple(ToolSpec(**{k: t[k] for k in ("name", "description", "parameters")},
                             implementation=_implementation(t, i, document, file),
                             mutates_state=t.get("mutates_state", True), returns=t.get("returns"))
                    for i, t in enumerate(document["tools"])),
        root=root,
        python_paths=python_paths,
        task_splits=document.get("task_splits"),
        mcp=document.get("mcp"),
    )


def check_module_names(domains: tuple[ToolDomain, ...]) -> None:
    """Refuse domains whose implementations share a module name: one episode process imports only one of them."""
    owners: dict[str, str] = {}
    for domain in domains:
        for module in sorted({t.class_path.split(":")[0] for t in domain.tools}):
            other = owners.setdefault(module, domain.name)
            if other != domain.name:
                raise ValueError(f"domains {other!r} and {domain.name!r} both implement tools in a module named "
                                 f"{module!r}; rename one, or use them in separate envs")


def available_domains() -> list[str]:
    """Names of the bundled domains."""
    return sorted(p.name for p in BUNDLED_SPECS.iterdir() if (p / DOMAIN_FILE).is_file())
