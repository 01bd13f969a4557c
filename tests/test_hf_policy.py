"""seal-eval's local Hugging Face policy plays a real episode with a locally built tiny model."""

from seal_envs.env import ToolUseEnv
from seal_envs.evaluation.policies import HFConfig, HFPolicy
from seal_envs.evaluation.runner import run_episode
from seal_trainer.tiny import build_tiny_model


def test_hf_policy_plays_a_shop_episode():
    """The random tiny model, greedy: its replies (16 newlines, no call) go to the env, which judges every turn an
    empty turn; a second run replays it token for token (the prefix cache changes nothing)."""
    from transformers import AutoTokenizer

    model = build_tiny_model()
    policy = HFPolicy(HFConfig(model_path=str(model), max_new_tokens=16, temperature=0.0, device="cpu"))
    env = ToolUseEnv(domain="shop", sandbox="inprocess", max_steps_per_turn=2)
    task = next(t for t in env.tasks if t.id == "shop_base_001")
    first, again = run_episode(env, policy, task), run_episode(env, policy, task)
    env.close()
    replies = [m["content"] for m in first.messages if m["role"] == "assistant"]
    tokenizer = AutoTokenizer.from_pretrained(model)
    assert len(replies) == len(task.turns) and all(len(tokenizer.encode(r)) == 16 for r in replies), replies
    assert first.reward == 0.0 and first.labels == ["empty_turn_model_response"] * len(task.turns)
    assert first.calls == [[[]] for _ in task.turns]
    assert again.messages == first.messages and again.requests_sha256 == first.requests_sha256
