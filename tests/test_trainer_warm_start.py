"""The trainer's supervised warm start (seal_trainer/warm_start.py) on the bundled shop tasks.

Demonstrations are executed ground truth that the verifier accepts; the rendered sequences carry labels only on
assistant tokens (each assistant message's content and its end-of-message token); a few SFT steps lower the
loss, also for the random tiny model.
"""

from __future__ import annotations

import pytest

from seal_trainer import warm_start as sft


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from seal_trainer.tiny import build_tiny_model

    # the default (smaller) tiny model, with a small vocabulary: fast to build and to train
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", vocab_size=768)


@pytest.fixture(scope="module")
def demos():
    from seal_envs.spec import load_domain
    from seal_envs.task import load_tasks

    tasks = load_tasks(load_domain("shop").root)
    return sft.record_demonstrations([t for t in tasks if t.id in ("shop_base_001", "shop_miss_param_001",
                                                                    "shop_miss_func_001")])


def test_demonstrations_pass_the_verifier(demos):
    assert all(d.reward == 1.0 for d in demos)
    for d in demos:
        roles = [m["role"] for m in d.messages]
        assert "tool" in roles and roles[0] == "user"


def test_loss_mask_covers_exactly_the_assistant_messages(tiny, demos):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    for demo in demos:
        examples = sft.render_examples(tok, demo)
        covered = "".join(sft.supervised_text(tok, e) for e in examples)
        expected = "".join(demo.messages[i]["content"] + tok.eos_token for i in sorted(demo.tools_at))
        assert covered == expected
        for e in examples:
            assert len(e["labels"]) == len(e["input_ids"])
            assert e["labels"][0] == -100  # the tool list / system block is never trained on
            masked = tok.decode([t for t, l in zip(e["input_ids"], e["labels"]) if l == -100])
            assert "<tools>" in masked and "<tool_response>" in masked
            assert "<tool_response>" not in sft.supervised_text(tok, e)
            assert all(l in (-100, t) for t, l in zip(e["input_ids"], e["labels"]))


def test_miss_func_renders_one_sequence_per_tool_list(tiny, demos):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    demo = next(d for d in demos if d.task_id == "shop_miss_func_001")
    assert len(sft.render_examples(tok, demo)) == 2  # cancel_order is added at turn 3


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_few_sft_steps_lower_the_loss(tiny, demos, dtype):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(tiny)
    examples = [e for d in demos for e in sft.render_examples(tok, d)]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    before = sft.mean_loss(model, examples)
    sft.train(model, examples, steps=8, lr=3e-3, warmup=2, log_every=100, dtype=dtype)
    after = sft.mean_loss(model, examples)
    assert after < before - 0.3, (before, after)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # bf16 compute, fp32 master weights


def test_a_bf16_warm_start_is_another_recipe_and_says_so(tiny, tmp_path, monkeypatch, capsys):
    import json
    import shutil

    base = tmp_path / "base"
    shutil.copytree(tiny, base)
    config = sft.WarmStartConfig(steps=2, demonstrations=2, lr=1e-3)
    monkeypatch.setenv("SEAL_COMPUTE_DTYPE", "float32")
    fp32 = sft.warm_started_model(base, "shop", config)
    monkeypatch.setenv("SEAL_COMPUTE_DTYPE", "bfloat16")
    bf16 = sft.warm_started_model(base, "shop", config)
    assert bf16 != fp32 and "computing in bfloat16" in capsys.readouterr().out
    assert [json.loads((p / "warm_start.json").read_text())["compute_dtype"] for p in (fp32, bf16)] == [
        "float32", "bfloat16"]


def test_tiny_model_warm_start_fits_the_demonstrations(tmp_path, demos):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seal_trainer.tiny import build_tiny_model

    torch.set_num_threads(2)
    cold = build_tiny_model(tmp_path / "cold", vocab_size=768)
    warm = sft.warm_started_model(cold, "shop", sft.WarmStartConfig(steps=30, lr=3e-3, demonstrations=36, split=""))
    tok = AutoTokenizer.from_pretrained(warm)
    examples = [e for d in demos for e in sft.render_examples(tok, d)]
    losses = [sft.mean_loss(AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32), examples) for p in (cold, warm)]
    assert losses[1] < losses[0] - 0.5, losses


def test_training_prompts_are_the_prompts_the_policy_sees(tiny, demos):
    """Each supervised message starts right after the exact tokens a policy is prompted with at that point."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    for demo in demos:
        by_tools = {}
        for i, tools in demo.tools_at.items():
            by_tools.setdefault(str(tools), []).append(i)
        for example, indices in zip(sft.render_examples(tok, demo), by_tools.values()):
            labels = example["labels"]
            starts = [k for k in range(1, len(labels)) if labels[k] != -100 and labels[k - 1] == -100]
            for k, i in zip(starts, sorted(indices)):
                prompt = tok.apply_chat_template(demo.messages[:i], tools=demo.tools_at[i], tokenize=True,
                                                 add_generation_prompt=True)
                prompt = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
                assert example["input_ids"][:k] == list(prompt)


def test_warm_started_model_is_cached_by_recipe(tiny, tmp_path):
    import json

    base = tmp_path / "base"
    import shutil

    shutil.copytree(tiny, base)
    config = sft.WarmStartConfig(steps=4, demonstrations=3, lr=1e-3)
    out = sft.warm_started_model(base, "shop", config)
    log = json.loads((out / "warm_start.json").read_text())
    assert log["config"]["steps"] == 4 and log["loss"][-1]["step"] == 4 and log["domain"] == "shop"
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert sft.warm_started_model(base, "shop", config) == out  # cached: nothing retrained
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    other = sft.warm_started_model(base, "shop", sft.WarmStartConfig(steps=2, demonstrations=3, lr=1e-3))
    assert other != out


def test_an_unknown_model_names_the_choices():
    from seal_trainer.models import resolve_model

    with pytest.raises(FileNotFoundError, match="smollm2-135m, tiny"):
        resolve_model("no-such-model")


def test_a_domain_with_only_a_tasks_file_demonstrates_its_training_half(capsys):
    """``seal.warm_start.split`` names a split such a domain does not declare: the warm start uses the tasks
    seal-train trains on (the first half of each category), never the whole file, and says so."""
    from conftest import LEDGER
    from seal_envs.task import load_tasks
    from seal_trainer.data import split_tasks

    tasks = sft._demonstration_tasks(str(LEDGER), sft.WarmStartConfig(steps=1, split="sft"))
    train, val = split_tasks(load_tasks(LEDGER), None, None)
    assert [t.id for t in tasks] == [t.id for t in train] and not {t.id for t in tasks} & {t.id for t in val}
    assert "declares no task_splits" in capsys.readouterr().out
