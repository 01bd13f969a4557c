"""Tools reach the model whatever its chat template (seal_envs.tool_template).

Checked on three tokenizers: the tiny model's (renders tools itself), SmolLM2-135M-Instruct's as shipped in its
GGUF file (its template drops ``tools=``) and a tokenizer with a Qwen2-style template of its own.
"""

from __future__ import annotations

import warnings

import pytest

from seal_envs.tool_template import HERMES_TOOL_TEMPLATE, ensure_tool_template, renders_tools

# A template in the Qwen2 layout, written here: tools as JSON lines inside <tools> in the system message.
QWEN2_STYLE = (
    "{%- if tools %}<|im_start|>system\nYou can call these functions:\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools><|im_end|>\n{%- endif %}"
    "{%- for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


@pytest.fixture(scope="module")
def shop_prompt():
    import gymnasium as gym

    env = gym.make("seal/Shop-v0", mode="eval", sandbox="inprocess")
    obs, info = env.reset(seed=0)
    env.close()
    return list(obs), info["tools"]


def _prompt_text(tokenizer, shop_prompt) -> str:
    messages, tools = shop_prompt
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)


def _assert_every_tool_rendered(text: str, tools) -> None:
    missing = [t["function"]["name"] for t in tools if f'"{t["function"]["name"]}"' not in text]
    assert not missing, missing


def test_tiny_model_template_renders_tools_and_is_kept(shop_prompt):
    from transformers import AutoTokenizer

    from seal_trainer.tiny import build_tiny_model

    tok = AutoTokenizer.from_pretrained(build_tiny_model())
    assert renders_tools(tok) and ensure_tool_template(tok, "tiny") is False
    _assert_every_tool_rendered(_prompt_text(tok, shop_prompt), shop_prompt[1])


def test_qwen2_style_template_is_kept(shop_prompt):
    from transformers import AutoTokenizer

    from seal_trainer.tiny import build_tiny_model

    tok = AutoTokenizer.from_pretrained(build_tiny_model())
    tok.chat_template = QWEN2_STYLE
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ensure_tool_template(tok, "qwen2-style") is False
    assert tok.chat_template == QWEN2_STYLE
    _assert_every_tool_rendered(_prompt_text(tok, shop_prompt), shop_prompt[1])


def test_smollm2_template_drops_tools_and_is_replaced_with_a_warning(shop_prompt):
    pytest.importorskip("gguf")
    from transformers import AutoTokenizer

    from seal_trainer.models import gguf_path

    path = gguf_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    messages, tools = shop_prompt
    assert not renders_tools(tok)
    assert _prompt_text(tok, shop_prompt) == tok.apply_chat_template(messages, tokenize=False,
                                                                     add_generation_prompt=True)
    with pytest.warns(UserWarning, match="SmolLM2"):
        assert ensure_tool_template(tok, "SmolLM2-135M-Instruct") is True
    assert tok.chat_template == HERMES_TOOL_TEMPLATE and renders_tools(tok)
    _assert_every_tool_rendered(_prompt_text(tok, shop_prompt), tools)
    assert ensure_tool_template(tok, "SmolLM2-135M-Instruct") is False  # idempotent


def test_a_template_without_tools_and_without_chatml_tokens_is_an_error():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, "[UNK]")))
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="tokenizer.chat_template"):
        ensure_tool_template(tok, "odd-model")
