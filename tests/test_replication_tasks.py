"""The shop domain's procedural tasks (tool_specs/shop/synthetic.py) and its fixed splits.

Generated tasks are valid (each one's executed ground truth earns reward 1 from the env's verifier), cover the
three categories with their semantics, and sets drawn with different seeds are disjoint and reproducible.
"""

from __future__ import annotations

import pytest

from seal_trainer import warm_start as sft
from tool_specs.shop import synthetic


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    from seal_envs.task import load_tasks

    path = synthetic.write_tasks(synthetic.generate(30, seed=7, prefix="t"), tmp_path_factory.mktemp("tasks") / "t.json")
    return load_tasks(path)  # validated against the task schema


def test_generated_tasks_pass_with_their_ground_truth(tasks):
    demos = sft.record_demonstrations(tasks)  # raises unless every demonstration gets reward 1
    assert len(demos) == 30
    assert {t.category for t in tasks} == {"base", "miss_param", "miss_func"}
    miss_func = [t for t in tasks if t.category == "miss_func"]
    assert all(any(turn.expects_abstention for turn in t.turns) for t in miss_func)
    assert all(any(not turn.ground_truth for turn in t.turns) for t in tasks if t.category == "miss_param")


def test_sets_with_different_seeds_are_disjoint_and_deterministic():
    a = synthetic.generate(40, seed=3, prefix="a")
    b = synthetic.generate(40, seed=2, prefix="b", exclude={synthetic.fingerprint(d) for d in a})
    assert not {synthetic.fingerprint(d) for d in a} & {synthetic.fingerprint(d) for d in b}
    assert synthetic.generate(40, seed=3, prefix="a") == a


def test_the_shop_domain_declares_disjoint_fixed_splits():
    from seal_envs.spec import load_domain

    domain = load_domain("shop")
    splits = {name: domain.split_tasks(name) for name in ("eval", "train", "sft", "test")}
    assert {k: len(v) for k, v in splits.items()} == {"eval": 24, "train": 32, "sft": 400, "test": 72}
    prints = {k: {synthetic.fingerprint(d) for d in synthetic.split_documents(k)} for k in splits}
    for i, a in enumerate(splits):
        for b in list(splits)[i + 1:]:
            assert not prints[a] & prints[b], (a, b)
    assert all(t.domain == "shop" for v in splits.values() for t in v)
