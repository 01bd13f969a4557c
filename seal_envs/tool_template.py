"""Make sure the tools reach the model, whatever its chat template.

Many instruct models' chat templates silently drop ``tools=`` (SmolLM2's does): the policy then never sees a
tool, and nothing fails. ``renders_tools`` detects that by rendering a probe conversation with and without a
tool; ``ensure_tool_template`` then installs ``HERMES_TOOL_TEMPLATE`` (ChatML with tools in the system message
inside ``<tools></tools>``, calls as ``<tool_call>{json}</tool_call>``, results as ``<tool_response>`` blocks
in a user turn, the layout Qwen2.5 and Hermes models use and ``seal_envs.parsing`` reads) and warns, naming
the model. The env, the verl agent loop, ``seal-eval --policy hf`` and the warm start all call it, so training,
evaluation and the warm start render the same prompt.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

# ChatML with Hermes/Qwen2.5-style tool rendering, written for this project. Tool schemas are compact JSON:
# the schemas dominate the prompt, and separators without spaces cost about 11% fewer tokens.
HERMES_TOOL_TEMPLATE = (
    "{%- set sys_text = '' -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}{%- set sys_text = messages[0]['content'] -%}{%- endif -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if sys_text -%}{{- sys_text + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson(separators=(',', ':')) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}"
    "\\n</tool_call><|im_end|>\\n' -}}"
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
    "{{- '\\n' -}}"
    "{%- set args = fn['arguments'] -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' -}}"
    "{%- if args is string -%}{{- args -}}{%- else -%}{{- args | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

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


def ensure_tool_template(tokenizer, model_name: str = "") -> bool:
    """Install ``HERMES_TOOL_TEMPLATE`` if the tokenizer's template ignores tools; True when it did.

    Idempotent; mutates ``tokenizer.chat_template``. Raises when the vocabulary lacks the ChatML tokens the
    Hermes layout needs, since rendering it then produces text the model was never trained on.
    """
    if getattr(tokenizer, "chat_template", None) and renders_tools(tokenizer):
        return False
    vocab = tokenizer.get_vocab()
    missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in vocab]
    if missing:
        raise ValueError(f"the chat template of {model_name or 'this model'} ignores tools and its vocabulary has no "
                         f"{' / '.join(missing)} for the Hermes tool layout: give the tokenizer a chat template "
                         f"that renders `tools` (tokenizer.chat_template = ...) and save it with the model")
    warnings.warn(f"the chat template of {model_name or 'this model'} ignores tools=; rendering tools with SEAL's "
                  f"Hermes tool template instead (seal_envs.tool_template)", stacklevel=2)
    tokenizer.chat_template = HERMES_TOOL_TEMPLATE
    return True


def chat_prompt_ids(tokenizer, messages, tools: list[dict[str, Any]] | None = None) -> list[int]:
    """The token ids of ``messages`` with ``tools``, ending in the assistant generation prompt."""
    chat = [{"role": m["role"], "content": m["content"]} for m in messages]
    encoded = tokenizer.apply_chat_template(chat, tools=tools or None, add_generation_prompt=True)
    # transformers >= 5 returns a BatchEncoding here, older releases the ids themselves
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def render_chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                add_generation_prompt: bool = False) -> str:
    """Render with ``HERMES_TOOL_TEMPLATE`` without a tokenizer (e.g. to build a tokenizer's training corpus)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, separators=None: json.dumps(x, ensure_ascii=False, separators=separators)
    return env.from_string(HERMES_TOOL_TEMPLATE).render(messages=messages, tools=tools,
                                                        add_generation_prompt=add_generation_prompt)


__all__ = ["HERMES_TOOL_TEMPLATE", "chat_prompt_ids", "ensure_tool_template", "render_chat", "renders_tools"]
