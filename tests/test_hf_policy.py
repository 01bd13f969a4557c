"""seal-eval's local Hugging Face policy plays a real episode with a locally built tiny model."""

from seal_envs.env import ToolUseEnv
from seal_envs.evaluation.policies import HFConfig, HFPolicy
from seal_envs.evaluation.runner import run_episode
from seal_trainer.tiny import build_tiny_model


def test_hf_policy_plays_a_shop_episode():
    policy = HFPolicy(HFConfig(model_path=str(build_tiny_model()), max_new_tokens=16, temperature=0.0, device="cpu"))
    env = ToolUseEnv(domain="shop", sandbox="inprocess", max_steps_per_turn=2)
    record = run_episode(env, policy, env.tasks[0])
    assert len(record.labels) == len(env.tasks[0].turns) and record.reward in (0.0, 1.0)
    env.close()
