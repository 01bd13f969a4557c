"""The CPU rollout server's prefix cache: reusing earlier keys/values never changes what is generated."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    from seal_trainer.tiny import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", vocab_size=768))


def _episode(server, prompt: list[int]) -> list[tuple[list[int], list[float]]]:
    """Three assistant turns, each extending the conversation like the agent loop does."""
    outs, ids = [], list(prompt)
    for turn in range(3):
        out = server._generate(ids, {"temperature": 0.0, "max_tokens": 12, "logprobs": True})
        outs.append((out.token_ids, out.log_probs))
        ids = ids + list(out.token_ids) + [5 + turn, 6, 7]  # a tool result appended as context
    return outs


def test_cached_generation_equals_uncached(model_path):
    from seal_trainer.cpu import HFRolloutServerImpl

    plain = HFRolloutServerImpl(model_path, 64, prefix_caching=False)
    cached = HFRolloutServerImpl(model_path, 64, prefix_caching=True)
    prompt = list(range(10, 90))
    for server in (plain, cached):
        server.runs = [_episode(server, prompt), _episode(server, prompt + [3])]  # second shares the prefix
    for (a_ids, a_lp), (b_ids, b_lp) in zip(sum(plain.runs, []), sum(cached.runs, [])):
        assert a_ids == b_ids
        assert a_lp == pytest.approx(b_lp, abs=1e-4)
    assert plain.stats()["reused_tokens"] == 0
    stats = cached.stats()
    assert stats["reused_tokens"] > 3 * stats["prefill_tokens"], stats


def test_a_weight_update_invalidates_the_cache(model_path):
    from seal_trainer.cpu import HFRolloutServerImpl

    server = HFRolloutServerImpl(model_path, 64)
    server._generate(list(range(10, 50)), {"temperature": 0.0, "max_tokens": 4})
    server.update_weights({k: v.clone() for k, v in server.model.state_dict().items()}, global_steps=1)
    before = server.stats()["reused_tokens"]
    server._generate(list(range(10, 50)), {"temperature": 0.0, "max_tokens": 4})
    assert server.stats()["reused_tokens"] == before
