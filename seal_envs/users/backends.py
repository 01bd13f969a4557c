"""The chat backends an LLM user runs on: an OpenAI-compatible endpoint (``seal-eval``'s HTTP client) or a local
Hugging Face model (``seal-eval``'s batched generator, loaded once per process and shared by every env)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from seal_envs.spaces import Message
from seal_envs.users.config import UserConfig
from seal_envs.users.simulator import Chat, UserError

_LOCAL: dict[tuple, Chat] = {}
_LOCK = threading.Lock()


def served_model(config: UserConfig) -> str:
    """The endpoint's only model (GET /models), for a config that names none."""
    from seal_envs.evaluation.policies import request_json

    url = config.target.rstrip("/") + "/models"
    try:
        listed = request_json(url, None, config.api_key_env, config.timeout_s)
        names = [entry["id"] for entry in listed["data"]]
    except (RuntimeError, KeyError, TypeError) as exc:
        raise UserError(f"cannot list the models of {config.target} ({exc}); name one with --user-model "
                        "(UserConfig.model)") from None
    if len(names) != 1:
        raise UserError(f"{config.target} serves {len(names)} models ({', '.join(map(str, names[:5]))}); name one "
                        "with --user-model (UserConfig.model)")
    return str(names[0])


def openai_chat(config: UserConfig) -> Chat:
    from seal_envs.evaluation.policies import completion_message, request_json

    model = config.model or served_model(config)
    url = config.target.rstrip("/") + "/chat/completions"

    def chat(messages: Sequence[Message]) -> str:
        body = {"model": model, "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
                "temperature": config.temperature, "max_tokens": config.max_tokens}
        content = completion_message(request_json(url, body, config.api_key_env, config.timeout_s), url).get("content")
        return content if isinstance(content, str) else ""

    return chat


def hf_chat(config: UserConfig) -> Chat:
    """One loaded model per (folder, sampling) in the process; its generator decodes concurrent requests together."""
    from seal_envs.evaluation.policies import HFConfig, HFPolicy

    key = (config.target, config.max_tokens, config.temperature, config.seed)
    with _LOCK:
        if key not in _LOCAL:
            policy = HFPolicy(HFConfig(config.target, max_new_tokens=config.max_tokens,
                                       temperature=config.temperature, seed=config.seed))
            _LOCAL[key] = lambda messages: policy.act(messages, [], 0)
        return _LOCAL[key]


def make_chat(config: UserConfig) -> Chat:
    if config.kind == "openai":
        return openai_chat(config)
    if config.kind == "hf":
        return hf_chat(config)
    raise ValueError(f"the {config.kind!r} user has no chat backend")
