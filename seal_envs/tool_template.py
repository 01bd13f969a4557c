"""Make sure the tools reach the model, whatever its chat template, in the chosen tool-call format.

Many instruct models' chat templates silently drop ``tools=`` (SmolLM2's does): the policy then never sees a
tool, and nothing fails. ``renders_tools`` detects that by rendering a probe conversation with and without a
tool; ``ensure_tool_template`` then installs SEAL's ChatML tool template for the run's tool format
(``seal_envs.formats``: for ``hermes``, ``HERMES_TOOL_TEMPLATE``, tools in the system message inside
``<tools></tools>``, calls as ``<tool_call>{json}</tool_call>``, results as ``<tool_response>`` blocks in a user
turn, the layout Qwen2.5 and Hermes models use) and warns, naming the model. A template SEAL installed for
another format is swapped for the chosen one; a model's own template that renders tools is kept (choose the
format it writes). The verl agent loop, ``seal-eval --policy hf``, the batched evaluation and the warm start
all call it, so training, evaluation and the warm start render the same prompt.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from seal_envs.formats import DEFAULT_TOOL_FORMAT, TemplateParts, ToolFormat, get_tool_format, tool_format_names
from seal_envs.formats.hermes import HERMES


def _literal(text: str) -> str:
    """``text`` inside a single-quoted Jinja string literal."""
    return text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")


def _on_loop(first: str, rest: str) -> str:
    """Jinja that writes ``first`` on a loop's first pass and ``rest`` on the others."""
    if first == rest:
        return "{{- '" + _literal(first) + "' -}}"
    return "{{- '" + _literal(first) + "' if loop.first else '" + _literal(rest) + "' -}}"


def chatml_tool_template(parts: TemplateParts) -> str:
    """SEAL's ChatML chat template that offers tools, writes calls and shows results as ``parts`` say.

    Written for this project. Tool schemas are compact JSON: the schemas dominate the prompt, and separators
    without spaces cost about 11% fewer tokens.
    """
    return (
        "{%- set sys_text = '' -%}"
        "{%- if messages and messages[0]['role'] == 'system' -%}{%- set sys_text = messages[0]['content'] -%}{%- endif -%}"
        "{%- if tools -%}"
        "{{- '<|im_start|>system\\n' -}}"
        "{%- if sys_text -%}{{- sys_text + '\\n\\n' -}}{%- endif -%}"
        "{{- '" + _literal(parts.offer_head + parts.tools_open) + "' -}}"
        "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson(separators=(',', ':')) -}}{%- endfor -%}"
        "{{- '" + _literal("\n" + parts.tools_close + parts.offer_tail) + "<|im_end|>\\n' -}}"
        "{%- elif sys_text -%}"
        "{{- '<|im_start|>system\\n' + sys_text + '<|im_end|>\\n' -}}"
        "{%- endif -%}"
        "{%- for message in messages -%}"
        "{%- if message['role'] == 'system' and loop.first -%}"
        "{%- elif message['role'] == 'user' or message['role'] == 'system' -%}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
        "{%- elif message['role'] == 'assistant' -%}"
        "{{- '<|im_start|>assistant' -}}"
        "{%- if message['content'] -%}{{- '\\n' + message['content'] -}}{%- endif -%}"
        "{%- for tc in message.get('tool_calls') or [] -%}"
        "{%- set fn = tc['function'] if tc['function'] is defined else tc -%}"
        + _on_loop(parts.calls_open, parts.calls_sep) +
        "{%- set args = fn['arguments'] -%}"
        "{{- '" + _literal(parts.call_open) + "' + fn['name'] + '" + _literal(parts.call_mid) + "' -}}"
        "{%- if args is string -%}{{- args -}}{%- else -%}{{- args | tojson -}}{%- endif -%}"
        "{{- '" + _literal(parts.call_close) + "' -}}"
        + ("{%- if loop.last -%}{{- '" + _literal(parts.calls_close) + "' -}}{%- endif -%}" if parts.calls_close else "")
        + "{%- endfor -%}"
        "{{- '<|im_end|>\\n' -}}"
        "{%- elif message['role'] == 'tool' -%}"
        "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}"
        "{{- '<|im_start|>" + _literal(parts.result_role) + "' -}}{%- endif -%}"
        "{{- '" + _literal(parts.result_open) + "' + message['content'] + '" + _literal(parts.result_close) + "' -}}"
        "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )


HERMES_TOOL_TEMPLATE = chatml_tool_template(HERMES.template)

_PROBE_TOOL = {"type": "function", "function": {
    "name": "seal_probe_tool_zq7", "description": "Probe.",
    "parameters": {"type": "object", "properties": {}, "required": []}}}
_PROBE_CHAT = [{"role": "user", "content": "hi"}]


def _render(tokenizer, tools: list[dict[str, Any]] | None) -> str:
    return tokenizer.apply_chat_template(_PROBE_CHAT, tools=tools, tokenize=False, add_generation_prompt=True)


def renders_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template shows ``tools=`` to the model (render with and without a tool)."""
    try:
        with_tools = _render(tokenizer, [_PROBE_TOOL])
    except Exception:  # a template that rejects tools renders none
        return False
    return with_tools != _render(tokenizer, None) and _PROBE_TOOL["function"]["name"] in with_tools


def tool_chat_template(tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> str:
    """SEAL's ChatML tool template for ``tool_format``."""
    return chatml_tool_template(get_tool_format(tool_format).template)


def ensure_tool_template(tokenizer, model_name: str = "", tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> bool:
    """Install SEAL's tool template for ``tool_format`` if the tokenizer's template ignores tools, or is SEAL's
    template of another format; True when it did.

    Idempotent; mutates ``tokenizer.chat_template``. Raises when the vocabulary lacks the ChatML tokens the
    layout needs, since rendering it then produces text the model was never trained on.
    """
    template = tool_chat_template(tool_format)
    current = getattr(tokenizer, "chat_template", None)
    if current == template:
        return False
    seal_own = current in {tool_chat_template(name) for name in tool_format_names()}
    if current and not seal_own and renders_tools(tokenizer):
        return False
    vocab = tokenizer.get_vocab()
    missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in vocab]
    if missing:
        raise ValueError(f"the chat template of {model_name or 'this model'} ignores tools and its vocabulary has no "
                         f"{' / '.join(missing)} for SEAL's ChatML tool layout: give the tokenizer a chat template "
                         f"that renders `tools` (tokenizer.chat_template = ...) and save it with the model")
    name = get_tool_format(tool_format).name
    if not seal_own:
        warnings.warn(f"the chat template of {model_name or 'this model'} ignores tools=; rendering tools with SEAL's "
                      f"{name} tool template instead (seal_envs.tool_template)", stacklevel=2)
    tokenizer.chat_template = template
    return True


def chat_prompt_ids(tokenizer, messages, tools: list[dict[str, Any]] | None = None) -> list[int]:
    """The token ids of ``messages`` with ``tools``, ending in the assistant generation prompt."""
    chat = [{"role": m["role"], "content": m["content"]} for m in messages]
    encoded = tokenizer.apply_chat_template(chat, tools=tools or None, add_generation_prompt=True)
    # transformers >= 5 returns a BatchEncoding here, older releases the ids themselves
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def render_chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                add_generation_prompt: bool = False, tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> str:
    """Render with SEAL's tool template without a tokenizer (e.g. to build a tokenizer's training corpus)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, separators=None: json.dumps(x, ensure_ascii=False, separators=separators)
    return env.from_string(tool_chat_template(tool_format)).render(messages=messages, tools=tools,
                                                                   add_generation_prompt=add_generation_prompt)


__all__ = ["HERMES_TOOL_TEMPLATE", "chat_prompt_ids", "chatml_tool_template", "ensure_tool_template", "render_chat",
           "renders_tools", "tool_chat_template"]
