"""Policies for ``seal-eval``: all act on the env's chat messages and answer in the env's tool-call format
(``seal_envs.formats``, ``tool_format=``, default Hermes).

- ``ReplayPolicy``: a script of calls per turn (by default the task's ground truth); each turn sends its calls
  in one message, then a short text answer. Used to prove the pipeline scores 100.
- ``OpenAIPolicy``: an OpenAI-compatible ``/chat/completions`` endpoint with ``tools=`` (urllib only).
- ``HFPolicy``: a local Hugging Face model, prompted through its chat template with ``tools=``; one instance is
  shared by ``seal-eval``'s worker threads, whose concurrent requests are decoded together.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from seal_envs.formats import DEFAULT_TOOL_FORMAT, ToolFormat, get_tool_format
from seal_envs.spaces import Message
from seal_envs.task import Task, ToolCall
from seal_envs.tool_template import chat_prompt_ids, ensure_tool_template

ABSTAIN_TEXT = "I cannot do that with the available functions; please give me the missing information."
DONE_TEXT = "Done."
MAX_REPLY_BYTES = 16 << 20  # an endpoint's answer


class Policy(Protocol):
    def start(self, task: Task) -> None:
        """A new episode begins (scripted policies look up their script)."""

    def act(self, messages: Sequence[Message], tools: list[dict[str, Any]], turn: int) -> str:
        """The assistant's next message, given the whole conversation so far."""


Script = Callable[[Task], Sequence[Sequence[ToolCall]]]


def ground_truth_script(task: Task) -> list[list[ToolCall]]:
    return [list(turn.ground_truth) for turn in task.turns]


class ReplayPolicy:
    """Replays a script: per turn, one message with the turn's calls (if any), then a text answer. The answer
    states the turn's ``required_response`` content, as a real agent's answer reporting the results would
    (``seal-envs validate`` checks that the replayed outputs hold it), and in the last turn what a tau2 task
    says must reach the user (``metadata["communicate_info"]``)."""

    def __init__(self, script: Script = ground_truth_script, tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT):
        self.script = script
        self.tool_format = get_tool_format(tool_format)
        self._plan: list[list[ToolCall]] = []
        self._required: list[tuple[str, ...]] = []
        self._sent: set[int] = set()

    def start(self, task: Task) -> None:
        self._plan = [list(calls) for calls in self.script(task)]
        self._required = [turn.required_response for turn in task.turns]
        self._required[-1] += tuple(task.metadata.get("communicate_info", ()))
        self._sent = set()

    def act(self, messages: Sequence[Message], tools: list[dict[str, Any]], turn: int) -> str:
        calls = self._plan[turn] if turn < len(self._plan) else []
        if calls and turn not in self._sent:
            self._sent.add(turn)
            return self.tool_format.format_calls(calls)
        answer = DONE_TEXT if calls else ABSTAIN_TEXT
        required = self._required[turn] if turn < len(self._required) else ()
        return f"{answer} {'; '.join(required)}" if required else answer


def to_openai_messages(messages: Sequence[Message],
                       tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> list[dict[str, Any]]:
    """Our transcript (tool calls as text in ``tool_format``) in the OpenAI chat format with structured tool calls."""
    tool_format = get_tool_format(tool_format)
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of the last assistant message's calls, answered by the next tool messages
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "assistant":
            parsed = tool_format.parse(message["content"])
            pending = [f"call_{index}_{j}" for j in range(len(parsed.calls))]
            entry: dict[str, Any] = {"role": "assistant", "content": parsed.content or None}
            if parsed.calls:
                entry["tool_calls"] = [{"id": i, "type": "function", "function": {
                    "name": c.name, "arguments": json.dumps(c.arguments)}} for i, c in zip(pending, parsed.calls)]
            out.append(entry)
        elif role == "tool" and pending:
            out.append({"role": "tool", "tool_call_id": pending.pop(0), "content": message["content"]})
        elif role == "tool":  # a reply to a malformed call: there is no id to answer, so it goes in as text
            out.append({"role": "user", "content": message["content"]})
        else:
            out.append({"role": role, "content": message["content"]})
    return out


def from_openai_message(message: dict[str, Any], tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT) -> str:
    """An OpenAI assistant message as our action text in ``tool_format``.

    Arguments the model broke stay the string it wrote, so the env reports that call as malformed."""
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            arguments = function.get("arguments")
        calls.append(ToolCall(function.get("name"), arguments))
    parts = [message.get("content") or "", get_tool_format(tool_format).format_calls(calls) if calls else ""]
    return "\n".join(p for p in parts if p)


@dataclass(frozen=True)
class OpenAIConfig:
    base_url: str  # e.g. http://localhost:8000/v1
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 2048
    timeout_s: float = 300.0


def request_json(url: str, body: dict[str, Any] | None, api_key_env: str, timeout_s: float,
                 max_bytes: int = MAX_REPLY_BYTES) -> Any:
    """POST ``body`` (GET without one) and the JSON answer, within ``timeout_s`` for the whole exchange (a server
    that sends slowly is cut off too) and ``max_bytes``; an endpoint's failure raises ``RuntimeError`` naming it."""
    headers = {"Content-Type": "application/json"}
    if os.environ.get(api_key_env):
        headers["Authorization"] = f"Bearer {os.environ[api_key_env]}"
    data = None if body is None else json.dumps(body).encode()
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers),
                                    timeout=timeout_s) as response:
            size = 0
            while chunk := response.read1(1 << 16):
                size += len(chunk)
                if size > max_bytes:
                    raise RuntimeError(f"{url}: the answer is over {max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url}: no complete answer within {timeout_s:g} s")
                chunks.append(chunk)
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{url}: HTTP {exc.code}: {exc.read(500)!r}") from None
    except (urllib.error.URLError, OSError) as exc:  # refused, reset, or a read that timed out
        raise RuntimeError(f"{url}: {getattr(exc, 'reason', exc)}") from None
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        raise RuntimeError(f"{url}: the answer is not JSON: {b''.join(chunks)[:200]!r}") from None


def completion_message(reply: Any, url: str) -> dict[str, Any]:
    """The first choice's message of a ``/chat/completions`` answer (``RuntimeError`` if it has none)."""
    try:
        message = reply["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        message = None
    if not isinstance(message, dict):
        raise RuntimeError(f"{url}: not a chat completion (no choices[0].message): {str(reply)[:200]}")
    return message


class OpenAIPolicy:
    """The endpoint decodes the model's own call format; its structured calls reach the env in ``tool_format``."""

    def __init__(self, config: OpenAIConfig, tool_format: str | ToolFormat = DEFAULT_TOOL_FORMAT):
        self.config = config
        self.tool_format = get_tool_format(tool_format)

    def start(self, task: Task) -> None:
        pass

    def act(self, messages: Sequence[Message], tools: list[dict[str, Any]], turn: int) -> str:
        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model, "messages": to_openai_messages(messages, self.tool_format),
                                "temperature": cfg.temperature, "max_tokens": cfg.max_tokens}
        if tools:
            body["tools"] = tools
        url = cfg.base_url.rstrip("/") + "/chat/completions"
        reply = request_json(url, body, cfg.api_key_env, cfg.timeout_s)
        return from_openai_message(completion_message(reply, url), self.tool_format)


@dataclass(frozen=True)
class HFConfig:
    model_path: str
    max_new_tokens: int = 1024
    temperature: float = 0.0  # 0: greedy
    device: str | None = None  # None: cuda if available, else cpu
    tool_format: str = DEFAULT_TOOL_FORMAT  # SEAL's tool template of this format where the model's drops tools=
    dtype: str = "auto"  # auto: bf16 on a GPU with bf16 or a CPU with bf16 units, else fp32
    seed: int = 0  # sampled runs: each request's seed derives from it and the prompt, whatever shares its batch


class HFPolicy:
    """A local model behind the shared batched generator (``seal_envs.evaluation.batch_generate``): thread-safe,
    so ``seal-eval``'s workers share one copy of the model and their requests are decoded together."""

    def __init__(self, config: HFConfig):
        import torch
        from transformers import AutoTokenizer

        from seal_envs.evaluation.batch_generate import GenerationQueue, Sampling, model_generator

        self.config = config
        device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(config.model_path)
        ensure_tool_template(self.tokenizer, config.model_path, config.tool_format)
        generator = model_generator(config.model_path, dtype=config.dtype, device=device,
                                    fallback_eos=self.tokenizer.eos_token_id, pad_id=self.tokenizer.pad_token_id)
        self.queue = GenerationQueue(generator)
        self.sampling = Sampling(temperature=config.temperature, seed=config.seed)

    def start(self, task: Task) -> None:
        pass

    def act(self, messages: Sequence[Message], tools: list[dict[str, Any]], turn: int) -> str:
        import zlib

        from seal_envs.evaluation.batch_generate import row_seed

        ids = chat_prompt_ids(self.tokenizer, messages, tools)
        seed = row_seed(self.config.seed, zlib.crc32(json.dumps(ids).encode()))
        new = self.queue.generate(ids, self.config.max_new_tokens, self.sampling, seed).tokens
        stop = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id} - {None}
        while new and new[-1] in stop:
            new.pop()
        return self.tokenizer.decode(new, skip_special_tokens=False)
