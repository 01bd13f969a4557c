"""Tool calls read from an assistant message exactly as BFCL's Hermes/Qwen function-calling handler reads them.

BFCL's ``QwenFCHandler`` is run on the message itself: its response cleaning (the text after ``</think>``),
its ``<tool_call>`` extraction (blocks that are not JSON are dropped) and its ``decode_execute`` (a block without
``"name"``/``"arguments"``, arguments that are not an object, or any other failure rejects the whole message: in
BFCL's loop that message has no calls and ends the turn). The calls kept are what BFCL executes; every other
block the tolerant parser of ``seal_envs.parsing`` can see is reported as a parse error, for the diagnosis.
"""

from __future__ import annotations

import json
from functools import cache
from types import SimpleNamespace
from typing import Any

from seal_envs.parsing import ParseLimits, ParsedAction, ParseError, parse_tool_calls
from seal_envs.task import ToolCall

REJECTED = "BFCL's Qwen/Hermes decoder does not accept this call (it needs a JSON object with \"name\" and " \
           "\"arguments\", each block on its own lines)"


@cache
def qwen_handler() -> Any:
    """BFCL's ``QwenFCHandler`` (its decoding methods need no model or server)."""
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler

    return QwenFCHandler("Qwen/Qwen2.5-7B-Instruct", temperature=0.0, registry_name="seal", is_fc_model=True)


def model_response(action: str) -> str:
    """The part of a raw completion BFCL decodes (its handler drops reasoning up to ``</think>``)."""
    completion = SimpleNamespace(choices=[SimpleNamespace(text=action)],
                                 usage=SimpleNamespace(prompt_tokens=0, completion_tokens=0))
    return qwen_handler()._parse_query_response_prompting(completion)["model_responses"]


def bfcl_calls(action: str) -> list[ToolCall]:
    """The calls BFCL's handler decodes from a raw completion (empty where it rejects the message)."""
    handler, text = qwen_handler(), model_response(action)
    try:
        handler.decode_execute(text, has_tool_call_tag=False)
    except Exception:  # BFCL's loop: "Failed to decode the model response. Proceed to next turn."
        return []
    calls = []
    for item in handler._extract_tool_calls(text):
        arguments = item["arguments"]
        # decode_execute accepted it, so string arguments are JSON of an object; the name is written with str()
        calls.append(ToolCall(str(item["name"]), json.loads(arguments) if isinstance(arguments, str) else arguments))
    return calls


def decode(action: str, limits: ParseLimits = ParseLimits()) -> ParsedAction:
    """BFCL's calls from ``action``; the other blocks a tolerant reader finds (within ``limits``) become parse
    errors."""
    if not isinstance(action, str):
        return parse_tool_calls(action, limits)
    calls = bfcl_calls(action)
    seen = parse_tool_calls(model_response(action), limits)
    errors = list(seen.errors)
    unmatched = list(calls)
    for call in seen.calls:
        if call in unmatched:
            unmatched.remove(call)
        else:
            errors.append(ParseError(json.dumps(call.to_json(), default=str), REJECTED))
    return ParsedAction(content=seen.content, calls=tuple(calls), errors=tuple(errors))
