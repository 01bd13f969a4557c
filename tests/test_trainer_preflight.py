"""seal-train checks its whole configuration in the parent process, before anything slow, with messages."""

from __future__ import annotations

import pytest

from seal_trainer.cli import compose, main
from seal_trainer.preflight import ConfigError, check_config


@pytest.mark.parametrize("overrides, message", [
    (["seal.ablation=nosuch"], "seal.ablation='nosuch' is not one of full, vanilla"),
    (["seal.ablation=no_evolutin"], "did you mean no_evolution?"),
    (["seal.model=nosuch"], "seal.model='nosuch' is neither a named model"),
    (["+seal.abalation=vanilla"], "seal.abalation is not a key of seal (did you mean seal.ablation?)"),
    (["+seal.reweighting.rhoo=dynamic"], "seal.reweighting.rhoo is not a key of seal.reweighting"),
    (["seal.reweighting.rho=dyn"], "must be 'fixed' or 'dynamic'"),
    (["seal.tool_format=nosuch"], "unknown tool format 'nosuch'"),
    (["seal.env.sandbox=podman"], "seal.env.sandbox='podman' is not one of docker, inprocess"),
    (["seal.domain=/nowhere/at/all"], "seal.domain='/nowhere/at/all' does not load"),
    (["seal.tool_format=mistral", "+seal.dataset.env_id=seal/BFCL-v3-MultiTurn-v0"], "use seal.tool_format=hermes"),
])
def test_a_bad_configuration_is_named_with_its_fix(overrides, message):
    with pytest.raises(ConfigError) as caught:
        check_config(compose(overrides=overrides, cpu=True))
    assert message in str(caught.value)


def test_every_problem_is_listed_at_once():
    with pytest.raises(ConfigError) as caught:
        check_config(compose(overrides=["seal.ablation=x", "seal.model=y"], cpu=True))
    assert "seal.ablation" in str(caught.value) and "seal.model" in str(caught.value)


def test_the_default_and_the_tiny_model_pass():
    check_config(compose(cpu=True))
    check_config(compose(overrides=["seal.model=tiny", "seal.domain=bfcl"], cpu=True))


def test_seal_train_exits_with_the_message_not_a_traceback(capsys, tmp_path):
    with pytest.raises(SystemExit) as caught:
        main(["-v", "seal.ablation=nosuch", f"trainer.default_local_dir={tmp_path}"])
    assert str(caught.value).startswith("seal-train: the configuration cannot train:")
    assert not list(tmp_path.iterdir())  # nothing was prepared
    with pytest.raises(SystemExit, match="seal-train: Could not override 'seal.nosuch'"):
        main(["-v", "seal.nosuch=1"])
