"""seal-train's composed config: one domain key, a Hugging Face checkpoint after the last step, rollouts per step."""

from __future__ import annotations

import pandas as pd
import pytest

from seal_trainer.cli import compose, final_policy, resolve_auto
from seal_trainer.config import seal_config_from


@pytest.fixture(scope="module")
def default():
    return compose(cpu=True)


def test_one_key_picks_the_domain_of_envs_dataset_and_warm_start(default):
    seal = seal_config_from(default)
    assert seal.domain == "shop" and seal.env_defaults()["domain"] == "shop" and seal.dataset.n_val == 12
    assert "domain" not in default.seal.env and "domain" not in default.seal.dataset
    assert seal_config_from(compose(overrides=["seal.domain=bfcl"], cpu=True)).env_defaults()["domain"] == "bfcl"


@pytest.mark.parametrize("key", ["seal.env.domain", "seal.dataset.domain", "+seal.env.domain"])
def test_the_replaced_domain_keys_say_what_to_set(key):
    with pytest.raises(SystemExit, match=r"set seal.domain=bfcl and remove seal\.\w+\.domain"):
        compose(overrides=[f"{key}=bfcl"], cpu=True)


def test_a_yaml_with_a_replaced_domain_key_is_refused():
    with pytest.raises(ValueError, match=r"seal.dataset.domain is replaced by seal.domain.*seal.domain=bfcl"):
        seal_config_from({"seal": {"domain": "shop", "dataset": {"domain": "bfcl"}}})


def test_the_default_keeps_the_final_policy_as_a_hugging_face_folder(default):
    assert default.trainer.save_freq > default.trainer.total_training_steps  # saved once, after the last step
    assert list(default.actor_rollout_ref.actor.checkpoint.save_contents) == ["hf_model"]


def test_auto_values_resolve_to_the_run_folder(tmp_path):
    cfg = compose(overrides=[f"trainer.default_local_dir={tmp_path}", "actor_rollout_ref.model.path=/a/model",
                             "seal.env.sandbox=inprocess"], cpu=True)
    resolve_auto(cfg)
    assert cfg.trainer.rollout_data_dir == str(tmp_path / "rollouts")
    train = pd.read_parquet(cfg.data.train_files)
    assert cfg.data.train_files == str(tmp_path / "data" / "train.parquet")
    assert set(train.seal_domain) == {"shop"} and set(train.seal_sandbox) == {"inprocess"}
    assert cfg.actor_rollout_ref.model.path == "/a/model"


def test_final_policy_is_the_last_checkpoint_with_weights(tmp_path):
    assert final_policy(tmp_path) is None
    folder = tmp_path / "global_step_3" / "actor" / "huggingface"
    folder.mkdir(parents=True)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    assert final_policy(tmp_path) is None  # config and tokenizer only: no weights were asked for
    (folder / "model.safetensors").write_bytes(b"")
    assert final_policy(tmp_path) == folder


@pytest.mark.parametrize("seal, message", [
    ({"ablaton": "full"}, r"unknown key seal\.ablaton; valid: ablation,"),
    ({"interface": {"min_cnt": 4}}, r"unknown key seal\.interface\.min_cnt; valid: .*min_count"),
    ({"reweighting": {"rho_overrides": {"spurious": 2.0}}}, r"unknown tag .* 'spurious'; valid: .*spurious_tool_call"),
    ({"reweighting": {"rho": "ema"}}, r"'fixed' or 'dynamic'"),
])
def test_unknown_keys_and_names_are_errors_that_name_them(seal, message):
    with pytest.raises(ValueError, match=message):
        seal_config_from({"seal": seal})


def test_the_seal_arm_is_the_references_full_seal_and_fixed_rho_its_ablation():
    full = seal_config_from(compose(cpu=True))
    assert full.resolved() == {"interface_evolution": True, "closed_loop_update": True, "reweighting": True}
    assert full.reweighting.rho == "dynamic" and full.interface.schema_cues == "always" and full.profile_window == 0
    fixed = seal_config_from({"seal": {"ablation": "fixed_rho"}})
    assert fixed.resolved()["reweighting"] and fixed.reweighting.rho == "fixed"
    assert seal_config_from({"seal": {"ablation": "full"}}).reweighting.rho == "dynamic"
