"""A LoRA run's checkpoint loads as the trained policy (seal_trainer/checkpoint.py).

The folder is written the way verl 0.9.1's ``FSDPCheckpointManager.save_checkpoint`` writes it for a PEFT model:
the PEFT model's full state dict saved through the plain model's ``save_pretrained``, and ``lora_train_meta.json``
beside it.
"""

from __future__ import annotations

import json

import pytest
import torch

peft = pytest.importorskip("peft")

from seal_trainer.checkpoint import merge_lora_weights, policy_folder  # noqa: E402
from seal_trainer.cli import final_policy  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from seal_trainer.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", vocab_size=768)


def _verl_lora_checkpoint(base, run_dir, step: int = 3, safe_serialization: bool = True):
    """A trained LoRA policy (adapters moved off PEFT's zero start) and its verl checkpoint in ``run_dir``."""
    from transformers import AutoModelForCausalLM

    policy = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                                 peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    torch.manual_seed(0)
    for name, param in policy.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.2)
    actor = run_dir / f"global_step_{step}" / "actor"
    plain = AutoModelForCausalLM.from_config(AutoModelForCausalLM.from_pretrained(base).config)
    plain.save_pretrained(actor / "huggingface", state_dict=policy.state_dict(), safe_serialization=safe_serialization)
    (actor / "lora_train_meta.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "task_type": "CAUSAL_LM"}))
    (run_dir / "latest_checkpointed_iteration.txt").write_text(str(step))
    return policy.eval()


@pytest.mark.parametrize("safe_serialization", [True, False], ids=["safetensors", "bin"])
def test_a_lora_checkpoint_loads_as_the_trained_policy(base, tmp_path, safe_serialization):
    from transformers import AutoModelForCausalLM

    policy = _verl_lora_checkpoint(base, tmp_path, safe_serialization=safe_serialization)
    ids = torch.randint(0, 768, (1, 12))
    folder = final_policy(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        expected, got = policy(input_ids=ids).logits, loaded(input_ids=ids).logits
        untrained = AutoModelForCausalLM.from_pretrained(base)(input_ids=ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, untrained, atol=1e-3)  # the adapters count
    assert policy_folder(folder.parent) == folder and not merge_lora_weights(folder, {"r": 4, "lora_alpha": 8})
    assert [f.name for f in folder.glob("*.bin")] == []  # one set of weights: the merged one


def test_adapters_it_cannot_merge_are_an_error_not_a_random_model(tmp_path):
    from safetensors.torch import save_file

    folder = tmp_path / "huggingface"
    folder.mkdir()
    save_file({"base_model.model.embed.lora_embedding_A.default": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="cannot merge"):
        merge_lora_weights(folder, {"r": 2, "lora_alpha": 4})
