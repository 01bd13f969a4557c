"""The shared batched generator: a batch generates what each request generates alone (greedy and seeded), greedy
equals transformers' ``generate``, concurrent requests share batches, the prefix cache is bounded by bytes and holds
a prefix that stored sequences share once; episodes played in one continuous batch equal one-at-a-time episodes;
the mechanism benchmark's arms evolve from the original profile."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest

from seal_envs.env import ToolUseEnv
from seal_envs.evaluation.batch_generate import Sampling, load_generator
from seal_envs.evaluation.batched import Job, Limits, play_episodes
from seal_envs.spec import load_domain
from seal_trainer.tiny import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", vocab_size=768))


@pytest.fixture(scope="module")
def tasks():
    return list(load_domain("shop").split_tasks("train"))[:3]


def _play(model: str, tasks, batch_size: int, sampling: Sampling = Sampling(), made: list | None = None):
    tokenizer, generator = load_generator(model)

    def make_env():
        env = ToolUseEnv("shop", tasks=tasks, sandbox="inprocess", max_steps_per_turn=4)
        if made is not None:
            made.append(env)
        return env

    jobs = [Job(t.id, s) for t in tasks for s in range(2)]
    # a random model rarely ends a message: keep capped messages, so episodes run several rounds
    limits = Limits(max_new_tokens=12, end_on_cap=False)
    return play_episodes(make_env, jobs, tokenizer, generator, sampling, batch_size, limits), generator


def test_batched_greedy_matches_one_at_a_time(tiny, tasks):
    one, _ = _play(tiny, tasks, batch_size=1)
    made: list[ToolUseEnv] = []
    batched, generator = _play(tiny, tasks, batch_size=4, made=made)
    assert [o.actions for o in batched] == [o.actions for o in one]
    assert [(o.task_id, o.sample, o.reward, o.labels) for o in batched] == \
        [(o.task_id, o.sample, o.reward, o.labels) for o in one]
    assert all(len(o.labels) == len(t.turns) for o, t in zip(batched, [t for t in tasks for _ in range(2)]))
    assert sum(len(o.actions) for o in batched) > len(batched)  # several rounds per episode
    assert generator.reused_tokens > generator.prefill_tokens  # the shared prompt is prefilled once
    assert len(made) == 4 and all(env._done and env._sandbox is None for env in made)  # ended and closed


def test_sampled_runs_are_reproducible_whatever_the_batch(tiny, tasks):
    sampling = Sampling(temperature=1.0, seed=3)
    first, _ = _play(tiny, tasks[:2], batch_size=4, sampling=sampling)
    second, _ = _play(tiny, tasks[:2], batch_size=4, sampling=sampling)
    alone, _ = _play(tiny, tasks[:2], batch_size=1, sampling=sampling)
    assert [o.actions for o in first] == [o.actions for o in second] == [o.actions for o in alone]
    assert len({o.actions[0] for o in first}) > 1  # sampled, not greedy


PROMPTS = [list(range(10, 70)), list(range(10, 40)) + [7, 8, 9], list(range(10, 70)), [3, 4]]
LIMITS = [24, 9, 16, 12]


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=1.0, top_p=0.9, top_k=40)],
                         ids=["greedy", "seeded"])
def test_a_batch_generates_what_each_request_generates_alone(tiny, sampling):
    _, generator = load_generator(tiny)
    together = generator.generate(PROMPTS, LIMITS, sampling, seeds=[11, 12, 13, 14])
    generator.clear()
    alone = [generator.generate([p], [n], sampling, seeds=[s])[0] for p, n, s in zip(PROMPTS, LIMITS, [11, 12, 13, 14])]
    assert [g.tokens for g in together] == [g.tokens for g in alone]
    assert [g.finished for g in together] == [g.finished for g in alone]
    for a, b in zip(together, alone):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4) and len(a.logprobs) == len(a.tokens)
        assert all(lp <= 0 for lp in a.logprobs)
    assert all(len(g.tokens) == n or g.finished for g, n in zip(together, LIMITS))


def test_prefix_and_rows_attention_equals_attention_over_the_whole_sequence():
    """The shared-prefix decode step is the softmax over prefix + row keys, split and merged: grouped-query heads,
    left-padded rows, boolean and additive masks."""
    import torch

    from seal_envs.evaluation.batch_generate import prefix_and_rows_attention

    torch.manual_seed(0)
    rows, heads, kv_heads, dim, shared, own = 3, 6, 2, 8, 11, 5
    query = torch.randn(rows, heads, 1, dim)
    prefix_keys, prefix_values = torch.randn(1, kv_heads, shared, dim), torch.randn(1, kv_heads, shared, dim)
    keys, values = torch.randn(rows, kv_heads, own, dim), torch.randn(rows, kv_heads, own, dim)
    keep = torch.ones(rows, 1, 1, own, dtype=torch.bool)
    keep[1, ..., :2] = keep[2, ..., :4] = False  # left padding of rows 1 and 2
    whole_keys = torch.cat([prefix_keys.expand(rows, -1, -1, -1), keys], dim=2)
    whole_values = torch.cat([prefix_values.expand(rows, -1, -1, -1), values], dim=2)
    whole_mask = torch.cat([torch.ones(rows, 1, 1, shared, dtype=torch.bool), keep], dim=-1)
    expected = torch.nn.functional.scaled_dot_product_attention(query, whole_keys, whole_values, attn_mask=whole_mask,
                                                                enable_gqa=True).transpose(1, 2)
    for mask in (keep, torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))):
        got, _ = prefix_and_rows_attention(query, prefix_keys, prefix_values, keys, values, mask)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    unmasked = torch.nn.functional.scaled_dot_product_attention(
        query, whole_keys, whole_values, enable_gqa=True, scale=0.3).transpose(1, 2)
    got, _ = prefix_and_rows_attention(query, prefix_keys, prefix_values, keys, values, None, 0.3)
    torch.testing.assert_close(got, unmasked, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=1.0, top_k=40)], ids=["greedy", "seeded"])
def test_rows_sharing_a_prefix_hold_it_once_and_generate_what_they_generate_alone(tiny, sampling):
    """The running rows' common prefix is held and read once; it shrinks when a row with less in common joins and
    grows back when that row leaves, and no row's tokens change."""
    base = list(range(10, 60))
    prompts = [base + [5, 6], base + [5, 6], base[:30] + [7, 8, 9], base + [61, 62]]
    limits, seeds = [40, 6, 8, 30], [1, 2, 3, 4]
    _, generator = load_generator(tiny)
    alone = [generator.generate([p], [n], sampling, seeds=[s])[0] for p, n, s in zip(prompts, limits, seeds)]
    generator.clear()
    results: dict[int, object] = {}
    shared = []
    for i in (0, 1):
        generator.admit(prompts[i], limits[i], sampling, seeds[i], functools.partial(results.__setitem__, i))
    generator.step()
    shared.append(generator.shared_tokens)
    for i in (2, 3):
        generator.admit(prompts[i], limits[i], sampling, seeds[i], functools.partial(results.__setitem__, i))
    while generator.running:
        generator.step()
        shared.append(generator.shared_tokens)
    assert [results[i].tokens for i in range(4)] == [g.tokens for g in alone]
    for i, g in enumerate(alone):
        assert results[i].logprobs == pytest.approx(g.logprobs, abs=1e-4)
    assert shared[0] == len(base) + 1 and 30 in shared  # base + [5], then what the joining row shares
    assert len(base) in shared[shared.index(30):]  # rows 1 and 2 ended: the two left share base again


def test_greedy_decoding_equals_transformers_generate(tiny):
    import torch
    from transformers import AutoModelForCausalLM

    _, generator = load_generator(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    ours = generator.generate(PROMPTS, LIMITS, Sampling())
    for prompt, limit, got in zip(PROMPTS, LIMITS, ours):
        reference = model.generate(torch.tensor([prompt]), max_new_tokens=limit, do_sample=False,
                                   eos_token_id=generator.eos_ids, pad_token_id=generator.pad_id)[0, len(prompt):]
        assert got.tokens == reference.tolist()[: len(got.tokens)] and len(got.tokens) in (limit, len(reference))


def test_different_seeds_sample_different_tokens(tiny):
    _, generator = load_generator(tiny)
    runs = generator.generate([PROMPTS[0]] * 4, [16] * 4, Sampling(temperature=1.0), seeds=[1, 2, 3, 1])
    assert runs[0].tokens == runs[3].tokens and len({tuple(r.tokens) for r in runs}) == 3
    assert generator.prefill_tokens == len(PROMPTS[0]) - 1  # the shared prompt is prefilled once


def test_concurrent_requests_are_decoded_together(tiny):
    from concurrent.futures import ThreadPoolExecutor

    from seal_envs.evaluation.batch_generate import GenerationQueue

    _, generator = load_generator(tiny)
    queue = GenerationQueue(generator, gather_s=0.05)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: queue.generate(PROMPTS[i % 4], LIMITS[i % 4], Sampling(), seed=i), range(8)))
    assert queue.requests == 8 and queue.batches < 8
    generator.clear()
    assert [g.tokens for g in got] == [generator.generate([PROMPTS[i % 4]], [LIMITS[i % 4]], Sampling())[0].tokens
                                       for i in range(8)]
    failing = queue.submit([1], 4)  # a bad request fails its caller, not the queue
    with pytest.raises(ValueError, match="at least 2 tokens"):
        failing.result()
    assert queue.generate(PROMPTS[0], 4).tokens == got[0].tokens[:4]


def test_a_request_arriving_mid_batch_joins_it_and_is_answered_when_it_ends(tiny):
    """Continuous batching: a short message does not wait for a long one decoding beside it (the next turn of a
    multi-turn episode), and joining the running batch changes no request's tokens."""
    import time

    from seal_envs.evaluation.batch_generate import GenerationQueue

    _, generator = load_generator(tiny)
    long_alone, = generator.generate([PROMPTS[0]], [400], Sampling())  # past the 256 tokens of room: grows once
    short_alone, = generator.generate([PROMPTS[1]], [3], Sampling())
    generator.clear()
    assert not long_alone.finished and len(long_alone.tokens) == 400
    queue = GenerationQueue(generator, join_s=0.0)
    before, joins = generator.generated_tokens, generator.joins
    long = queue.submit(PROMPTS[0], 400)
    while generator.generated_tokens < before + 5:
        time.sleep(0.001)
    short = queue.submit(PROMPTS[1], 3)
    assert short.result(timeout=120).tokens == short_alone.tokens
    assert not long.done()  # answered while the long one still decodes
    assert long.result(timeout=120).tokens == long_alone.tokens
    assert generator.joins == joins + 2 and queue.batches == 2 and generator.running == 0


def test_the_prefix_cache_is_bounded_by_bytes_and_shares_without_copying():
    import torch
    from seal_envs.prefix_cache import PrefixCache

    def pieces(n, *shared):  # 2 layers of 1 x 1 x n x 4 float32 (64 bytes per token), after the shared pieces
        return [([*shared, torch.arange(n * 4.).view(1, 1, n, 4)], [*shared, torch.zeros(1, 1, n, 4)])
                for _ in range(2)]

    prefix = PrefixCache(max_bytes=64 * 25)
    prefix.store(list(range(10)), pieces(10))
    prefix.store(list(range(12)), pieces(12))  # extends the first: replaces it
    assert len(prefix) == 1 and prefix.nbytes == 64 * 12
    reused, view = prefix.lookup(list(range(8)) + [99])
    assert reused == 8 and [p.shape[-2] for p in view[0][0]] == [8]
    assert view[0][0][0].untyped_storage().data_ptr() == prefix._entries[0][1][0][0][0].untyped_storage().data_ptr()
    prefix.store([50 + i for i in range(12)], pieces(12))  # 24 tokens held: both fit
    assert len(prefix) == 2
    prefix.store([80 + i for i in range(5)], pieces(5))  # 29 > 25: the least recently used goes
    assert len(prefix) == 2 and prefix.nbytes <= 64 * 25 and prefix.lookup(list(range(12)))[0] == 0
    prefix.store(list(range(30)), pieces(30))  # larger than the whole budget: nothing is kept
    assert len(prefix) == 0


def test_sequences_that_share_a_prefix_piece_hold_it_once():
    import torch
    from seal_envs.prefix_cache import PrefixCache

    shared = torch.ones(1, 1, 10, 4)  # 160 bytes, referenced by both entries
    prefix = PrefixCache(max_bytes=1 << 20)
    for tail in (100, 200):
        own_keys = torch.zeros(1, 1, 2, 4)
        prefix.store(list(range(10)) + [tail, tail + 1], [([shared, own_keys], [shared, shared[:, :, :2]])])
    assert len(prefix) == 2 and prefix.nbytes == 160 + 2 * 32  # the views of shared count with shared's storage
    reused, got = prefix.lookup(list(range(10)) + [200, 5])
    assert reused == 11 and [p.shape[-2] for p in got[0][0]] == [10, 1] and got[0][0][0] is shared


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=1.0, top_k=40)], ids=["greedy", "seeded"])
def test_the_rows_of_a_batch_store_their_shared_prefix_once_and_later_turns_reuse_it(tiny, sampling):
    """Each row's keys/values are kept for its conversation's next turn, the prompt the rows shared as one tensor;
    a next turn that extends a stored sequence prefills only its new tokens and generates what it generates
    without any cache."""
    base = list(range(10, 90))
    prompts = [base + [5, 6], base + [7, 8], base + [9]]
    _, generator = load_generator(tiny)
    first = generator.generate(prompts, [6, 6, 6], sampling, seeds=[1, 2, 3])
    entries = [pieces for _, pieces in generator.cache._entries]
    assert len(entries) == 3 and all(pieces[0][0][0] is entries[0][0][0][0] for pieces in entries)
    shared = entries[0][0][0][0]
    assert shared.shape[-2] == len(base)  # the prompt the three rows share, one tensor in every layer
    shared_bytes = sum(p.numel() * p.element_size() for keys, values in entries[0] for p in (keys[0], values[0]))
    copies = sum(p.numel() * p.element_size()
                 for pieces in entries for keys, values in pieces for p in (*keys, *values))
    assert generator.cache.nbytes == copies - 2 * shared_bytes  # held once, not three times
    follow = [p + g.tokens + [40, 41, 42] for p, g in zip(prompts, first)]
    before = generator.prefill_tokens
    again = generator.generate(follow, [8, 8, 8], sampling, seeds=[4, 5, 6])
    assert generator.prefill_tokens - before == 3 * 3  # the new tokens after each stored sequence
    _, fresh = load_generator(tiny)
    alone = [fresh.generate([f], [8], sampling, seeds=[s])[0] for f, s in zip(follow, (4, 5, 6))]
    assert [g.tokens for g in again] == [g.tokens for g in alone]


def _mechanism():
    spec = importlib.util.spec_from_file_location("mechanism", ROOT / "benchmarks" / "mechanism.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mechanism_arms_evolve_from_the_original_profile():
    from seal_envs.evaluation.batched import Outcome

    mechanism = _mechanism()
    outcomes = ([Outcome("a", i, 0.0, ["argument_mismatch"], ["state_mismatch"]) for i in range(9)]
                + [Outcome("b", i, 1.0, ["pass"], ["pass"]) for i in range(9)]
                + [Outcome("c", 0, 0.0, ["infrastructure_error"], ["infrastructure_error"], infrastructure_error=True)])
    profile = mechanism.outcomes_profile(outcomes)
    assert profile.tags["state_mismatch"].count == 9 and "infrastructure_error" not in profile.labels
    arms = mechanism.arm_interfaces(profile, mechanism.ARMS)
    evolved = arms["evolved"]
    assert evolved.schema_cues and not evolved.error_hints and evolved.guidelines == ("state_mismatch",)
    assert arms["schema_cues"].schema_cues and not arms["schema_cues"].guidelines
    assert "error_hints" not in arms  # the default gate never turns them on (the reference's main config)
    assert arms["guidelines"].guidelines == evolved.guidelines and not arms["guidelines"].schema_cues
    only_passes = mechanism.arm_interfaces(mechanism.outcomes_profile(outcomes[9:18]), mechanism.ARMS)
    assert only_passes["evolved"].guidelines == ()  # nothing failed: no guideline, only the schema cues


def test_mechanism_summary_counts_groups_with_an_advantage():
    from seal_envs.evaluation.batched import Outcome

    mechanism = _mechanism()
    outcomes = [Outcome("a", 0, 1.0, ["pass"]), Outcome("a", 1, 0.0, ["state_mismatch"]),
                Outcome("b", 0, 0.0, ["missing_tool_call"]), Outcome("b", 1, 0.0, ["infrastructure_error"])]
    summary = mechanism.arm_summary(outcomes, samples=2)
    assert summary["success_rate"] == 0.25 and summary["nonzero_advantage_groups"] == 0.5
    assert summary["turn_pass_rate"] == pytest.approx(1 / 3)


def test_mechanism_weight_table_per_label_and_tag():
    from seal_envs.evaluation.batched import Outcome

    mechanism = _mechanism()
    outcomes = [Outcome("a", 0, 1.0, ["pass"], ["pass"]),
                Outcome("a", 1, 0.0, ["missing_tool_call"], ["empty_turn_model_response"]),
                Outcome("b", 0, 0.0, ["spurious_tool_call"], ["spurious_tool_call"]),
                Outcome("b", 1, 0.0, ["spurious_tool_call"], ["spurious_tool_call"])]
    table = mechanism.weight_table(outcomes)
    assert table["tags"]["empty_turn_model_response"]["w_fixed"] == 1.5
    assert table["labels"]["spurious_tool_call"] == {**table["labels"]["spurious_tool_call"], "rollouts": 2,
                                                     "with_gradient": 0, "w_fixed": 2.0, "w_fixed_grad": None}
    assert table["labels"]["pass"]["with_gradient"] == 1


def test_the_compute_dtype_follows_the_cpus_bf16_units_unless_pinned(tiny, monkeypatch):
    import torch

    from seal_envs.evaluation import batch_generate
    from seal_envs.evaluation.batch_generate import DTYPE_ENV, compute_dtype, model_generator

    monkeypatch.delenv(DTYPE_ENV, raising=False)
    for units, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(batch_generate, "cpu_has_bf16_units", lambda units=units: units)
        assert compute_dtype("auto") == expected
        monkeypatch.setenv(DTYPE_ENV, "float32")
        assert compute_dtype("auto") == "float32"  # the pin wins over the CPU's units
        monkeypatch.delenv(DTYPE_ENV)
    monkeypatch.setenv(DTYPE_ENV, "half")
    with pytest.raises(ValueError, match=r"SEAL_COMPUTE_DTYPE must be float32 or bfloat16, not 'half'"):
        compute_dtype("auto")
    monkeypatch.setenv(DTYPE_ENV, "bfloat16")
    assert compute_dtype("float32") == "float32"  # an explicit request is not overridden
    monkeypatch.delenv(DTYPE_ENV)
    assert compute_dtype("float32") == "float32"
    with pytest.raises(ValueError, match="auto, float32 or bfloat16"):
        compute_dtype("fp8")
    generator = model_generator(tiny, dtype="bfloat16")  # the bf16 path decodes (slowly without bf16 units)
    assert generator.model.dtype == torch.bfloat16
    out = generator.generate(PROMPTS[:2], [6, 6], Sampling(temperature=1.0), seeds=[1, 2])
    assert all(len(g.tokens) == len(g.logprobs) > 0 and all(lp <= 0 for lp in g.logprobs) for g in out)
