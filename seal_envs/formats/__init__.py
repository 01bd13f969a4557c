"""Tool-call formats by name: how a model family writes calls, and how tools and results reach it.

``get_tool_format("mistral")`` gives the one implementation the env (decoding), the policies of ``seal-eval``,
the batched evaluation, the verl agent loop and the warm start all use; ``tool_format="hermes"`` is the
default everywhere. ``register_tool_format(name, format)`` adds a format of your own (a ``ToolFormat``).
"""

from __future__ import annotations

from seal_envs.formats.base import ParseError, ParseLimits, ParsedAction, TemplateParts, ToolFormat
from seal_envs.formats.hermes import HERMES
from seal_envs.formats.llama3_json import LLAMA3_JSON
from seal_envs.formats.mistral import MISTRAL

DEFAULT_TOOL_FORMAT = HERMES.name
_FORMATS: dict[str, ToolFormat] = {f.name: f for f in (HERMES, MISTRAL, LLAMA3_JSON)}


def register_tool_format(name: str, tool_format: ToolFormat) -> None:
    """Make ``tool_format`` selectable as ``tool_format=name`` (re-registering a name replaces it)."""
    if not isinstance(tool_format, ToolFormat):
        raise TypeError(f"register_tool_format({name!r}, ...) needs a seal_envs.formats.ToolFormat, "
                        f"not {type(tool_format).__name__}")
    _FORMATS[name] = tool_format


def tool_format_names() -> tuple[str, ...]:
    return tuple(_FORMATS)


def get_tool_format(tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> ToolFormat:
    """The format registered as ``tool_format`` (a ``ToolFormat`` passes through)."""
    if isinstance(tool_format, ToolFormat):
        return tool_format
    if tool_format not in _FORMATS:
        raise ValueError(f"unknown tool format {tool_format!r}; known: {', '.join(_FORMATS)} "
                         f"(add one with seal_envs.formats.register_tool_format)")
    return _FORMATS[tool_format]


__all__ = ["DEFAULT_TOOL_FORMAT", "ParseError", "ParseLimits", "ParsedAction", "TemplateParts", "ToolFormat",
           "get_tool_format", "register_tool_format", "tool_format_names"]
