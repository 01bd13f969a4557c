"""Smoke test of the replication benchmark's SFT warm start (benchmarks/replication/sft_warm_start.py).

The demonstrations are executed ground truth that the verifier accepts; the rendered sequences carry labels
only on assistant tokens (each assistant message's content and its <|im_end|>); a few SFT steps lower the loss.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPLICATION = Path(__file__).resolve().parents[1] / "benchmarks" / "replication"
sys.path.insert(0, str(REPLICATION))

import common  # noqa: E402
import sft_warm_start as sft  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from seal_trainer.tiny import build_tiny_model

    # the default (smaller) tiny model, with a small vocabulary: fast to build and to train
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", vocab_size=768)


@pytest.fixture(scope="module")
def demos():
    train, _ = common.check_split()
    picked = [t for t in train if t.id in ("shop_base_001", "shop_miss_param_001", "shop_miss_func_001")]
    return sft.record_demonstrations(picked)


def test_split_is_fixed_and_disjoint():
    train, held = common.check_split()
    assert len(held) == 11 and len(train) == 25
    assert not {t.id for t in train} & {t.id for t in held}
    assert {t.category for t in held} == {"base", "miss_param", "miss_func"}


def test_demonstrations_pass_the_verifier(demos):
    assert all(d.reward == 1.0 for d in demos)
    for d in demos:
        roles = [m["role"] for m in d.messages]
        assert "tool" in roles and roles[0] == "user"


def test_loss_mask_covers_exactly_the_assistant_messages(tiny, demos):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    for demo in demos:
        examples = sft.render_segments(tok, demo)
        covered = "".join(sft.assistant_text_of(tok, e) for e in examples)
        expected = "".join(demo.messages[i]["content"] + sft.IM_END for i in sorted(demo.tools_at))
        assert covered == expected
        for e in examples:
            assert len(e["labels"]) == len(e["input_ids"])
            assert e["labels"][0] == -100  # the tool list / system block is never trained on
            masked = tok.decode([t for t, l in zip(e["input_ids"], e["labels"]) if l == -100])
            assert "<tools>" in masked and "<tool_response>" in masked
            assert "<tool_response>" not in sft.assistant_text_of(tok, e)
            assert all(l in (-100, t) for t, l in zip(e["input_ids"], e["labels"]))


def test_miss_func_renders_one_sequence_per_tool_list(tiny, demos):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    demo = next(d for d in demos if d.task_id == "shop_miss_func_001")
    assert len(sft.render_segments(tok, demo)) == 2  # cancel_order is added at turn 2


def test_a_few_sft_steps_lower_the_loss(tiny, demos):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(tiny)
    examples = [e for d in demos for e in sft.render_segments(tok, d)]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny, torch_dtype=torch.float32)
    before = sft.mean_loss(model, examples)
    sft.train(model, examples, steps=8, lr=3e-3, warmup=2, log_every=100)
    after = sft.mean_loss(model, examples)
    assert after < before - 0.3, (before, after)
