"""A tiny Qwen2 policy and BPE tokenizer built locally (no downloads), for tests and CPU runs.

``build_tiny_model(path)`` writes an ordinary Hugging Face folder (``config.json``, ``model.safetensors``,
``tokenizer.json``, ``tokenizer_config.json`` with a chat template, ``generation_config.json``) that
``AutoModelForCausalLM`` / ``AutoTokenizer`` and verl load like any checkpoint:

- the tokenizer is a byte-level BPE trained with ``tokenizers`` on text we generate here (the bundled tool
  domains' schemas, their tasks' user turns and Hermes ``<tool_call>`` blocks of their ground truth), with
  ChatML special tokens (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``);
- the chat template is ``seal_envs.tool_template.HERMES_TOOL_TEMPLATE`` (ChatML, tools in the system
  message), so verl's Qwen continuous-token builder applies unchanged;
- the model is a randomly initialised ``Qwen2ForCausalLM`` of a few hundred thousand parameters (fit it on
  executed demonstrations with ``seal_trainer.warm_start.warm_started_model`` like any other model).

The build is deterministic for a given ``seed`` and cached: a folder that already holds a complete build with
the same recipe hash is reused.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from seal_envs.tool_template import HERMES_TOOL_TEMPLATE, render_chat
from seal_trainer.model_cache import default_cache_dir, is_built, save_built

RECIPE_VERSION = 3
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EXTRA_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"]

DEFAULT_MODEL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=8192)


def _tasks_json(domain) -> tuple:
    """The tasks in a domain's ``tasks.json``; none for a domain without one (e.g. BFCL's, from bfcl-eval)."""
    from seal_envs.task import load_tasks

    try:
        return load_tasks(domain.root)
    except Exception:
        return ()


def _corpus(domains: Sequence[str], seed: int) -> list[str]:
    """Training text for the tokenizer: rendered chats of the bundled tasks."""
    from seal_envs.spec import load_domain

    rng = random.Random(seed)
    chats: list[str] = []
    for name in domains:
        domain = load_domain(name)
        tools = [t.openai_schema() for t in domain.tools]
        chats.append(json.dumps(tools, indent=2))  # a domain without tasks still contributes its schema text
        for task in _tasks_json(domain):
            messages: list[dict[str, Any]] = [{"role": "system", "content": task.system_prompt or
                                               "You are a helpful assistant."}]
            for turn in task.turns:
                messages.append({"role": "user", "content": turn.user})
                for call in turn.ground_truth:
                    messages.append({"role": "assistant", "content": "<tool_call>\n" + json.dumps(
                        {"name": call.name, "arguments": call.arguments}) + "\n</tool_call>"})
                    messages.append({"role": "tool", "content": json.dumps({"ok": True})})
                answer = " ".join(turn.required_response) or "Done."
                messages.append({"role": "assistant", "content": answer})
            chats.append(render_chat(messages, tools))
    rng.shuffle(chats)
    return chats


def _recipe(domains: Sequence[str], vocab_size: int, seed: int, model: dict) -> str:
    doc = {"v": RECIPE_VERSION, "domains": list(domains), "vocab": vocab_size, "seed": seed, "model": model,
           "template": HERMES_TOOL_TEMPLATE}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 2048):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with ChatML tokens and our chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIAL_TOKENS[1:], model_max_length=32768,
                                   clean_up_tokenization_spaces=False)
    fast.add_tokens(EXTRA_TOKENS)  # normal (not special) tokens: they survive skip_special_tokens
    fast.chat_template = HERMES_TOOL_TEMPLATE
    return fast


def build_tiny_model(path: str | Path | None = None, *, domains: Sequence[str] = ("shop",), vocab_size: int = 2048,
                     seed: int = 0, model_kwargs: dict | None = None, force: bool = False) -> Path:
    """Build (or reuse) the tiny model folder at ``path`` and return it.

    Default path: ``<cache>/tiny-qwen2-<recipe hash>``.
    """
    model_cfg = {**DEFAULT_MODEL, **(model_kwargs or {})}
    recipe = _recipe(domains, vocab_size, seed, model_cfg)
    path = Path(path) if path is not None else default_cache_dir() / f"tiny-qwen2-{recipe}"
    if not force and is_built(path, recipe):
        return path

    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    corpus = _corpus(domains, seed)
    tokenizer = build_tokenizer(corpus, vocab_size)
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=True, rope_theta=10000.0,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, torch_dtype="float32", **model_cfg)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=[tokenizer.eos_token_id],
                                               pad_token_id=tokenizer.pad_token_id, do_sample=True)
    return save_built(model, tokenizer, path, {"recipe": recipe, "domains": list(domains)})


__all__ = ["build_tiny_model", "build_tokenizer"]
