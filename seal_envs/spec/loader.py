"""Load and validate tool-domain JSON files."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from functools import cache, wraps
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

BUNDLED_SPECS = Path(str(resources.files("tool_specs")))
"""Directory of the tool domains shipped with the package (``tool_specs/``)."""

DOMAIN_FILE = "tools.json"


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


@dataclass(frozen=True)
class ToolDomain:
    """A named set of tools plus the directory they were loaded from."""

    name: str
    description: str
    tools: tuple[ToolSpec, ...]
    root: Path
    python_paths: tuple[Path, ...] = field(default=())
    task_splits: str | None = None  # "package.module:function" giving the tasks of a fixed split

    def split_tasks(self, split: str) -> tuple:
        """The tasks of the domain's own fixed ``split`` (``"train"`` / ``"eval"``), for domains that declare one."""
        if not self.task_splits:
            raise ValueError(f"domain {self.name!r} declares no task_splits; its tasks are {self.root / 'tasks.json'}")
        module, function = self.task_splits.split(":")
        return tuple(getattr(importlib.import_module(module), function)(split))

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


def _json_path(path: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def validate_document(document: Any, schema_name: str, file: str | Path) -> None:
    """Validate ``document`` against one of our shipped schemas; raise the most relevant error."""
    error = jsonschema.exceptions.best_match(_validator(schema_name).iter_errors(document))
    if error is not None:
        raise SpecError(file, _json_path(error.absolute_path), error.message)


def read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text())
    except FileNotFoundError:
        raise SpecError(file, "$", "file not found") from None
    except json.JSONDecodeError as exc:
        raise SpecError(file, "$", f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None


def _check_tool(tool: dict[str, Any], index: int, file: Path) -> None:
    where = f"$.tools[{index}]"
    params = tool["parameters"]
    try:
        jsonschema.Draft202012Validator.check_schema(params)
    except jsonschema.SchemaError as exc:
        raise SpecError(file, f"{where}.parameters{_json_path(exc.path)[1:]}", f"not a valid JSON Schema: {exc.message}") from None
    unknown = [r for r in params.get("required", []) if r not in params["properties"]]
    if unknown:
        raise SpecError(file, f"{where}.parameters.required", f"names {unknown} that are not in 'properties'")


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
        _check_tool(tool, i, file)
        if tool["name"] in names:
            raise SpecError(file, f"$.tools[{i}].name", f"duplicate tool name {tool['name']!r}")
        names.add(tool["name"])
    root = file.parent
    return ToolDomain(
        name=document["domain"],
        description=document["description"],
        tools=tuple(ToolSpec(**{k: t[k] for k in ("name", "description", "parameters", "implementation")},
                             mutates_state=t.get("mutates_state", True), returns=t.get("returns"))
                    for t in document["tools"]),
        root=root,
        python_paths=tuple((root / p).resolve() for p in document.get("python_paths", [])),
        task_splits=document.get("task_splits"),
    )


def available_domains() -> list[str]:
    """Names of the bundled domains."""
    return sorted(p.name for p in BUNDLED_SPECS.iterdir() if (p / DOMAIN_FILE).is_file())
