"""The held-out evaluation (standard errors by task, paired comparisons) and the comparison runner's pieces."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from seal_envs.evaluation.heldout import (HeldoutSettings, compare, evaluate_model, evaluation_sets, main, pooled,
                                         summarize)
from seal_envs.evaluation.stats import detectable_difference, mean_se, paired_difference

REPO = Path(__file__).resolve().parents[1]


def _comparison():
    spec = importlib.util.spec_from_file_location("comparison", REPO / "benchmarks" / "comparison.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("comparison", module)
    spec.loader.exec_module(module)
    return module


def test_standard_error_is_over_tasks_and_the_paired_interval_holds_the_difference():
    s = mean_se([1.0, 0.0, 0.5, 0.5])
    assert s["mean"] == 0.5 and s["n"] == 4 and math.isclose(s["se"], math.sqrt((0.25 + 0.25) / 3 / 4))
    a = {"t1": 1.0, "t2": 0.75, "t3": 0.5, "t4": 0.25, "other": 1.0}
    b = {"t1": 0.75, "t2": 0.5, "t3": 0.5, "t4": 0.0}
    d = paired_difference(a, b)
    assert d["n"] == 4 and math.isclose(d["diff"], 0.1875) and d["better"] == 3 and d["worse"] == 0
    half = 3.182 * 0.0625  # t(0.975, 3) x se of the differences (.25, .25, 0, .25)
    assert d["ci"] == pytest.approx([0.1875 - half, 0.1875 + half], abs=1e-3) and d["ci"][0] < 0  # 4 tasks: unresolved
    assert detectable_difference(0.05) == pytest.approx(0.14, abs=0.01)  # (1.96 + 0.84) x se
    with pytest.raises(ValueError, match="share no task"):
        paired_difference({"x": 1.0}, {"y": 1.0})


def test_the_evaluation_sets_are_the_whole_eval_split_the_bundled_tasks_and_the_test_split():
    sets = evaluation_sets("shop")
    assert {name: len(tasks) for name, tasks in sets.items()} == {"heldout": 24, "ood": 36, "test": 72}
    ids = {name: {t.id for t in tasks} for name, tasks in sets.items()}
    assert not ids["heldout"] & ids["ood"] and not ids["test"] & (ids["heldout"] | ids["ood"])


@pytest.mark.slow
def test_a_model_is_evaluated_greedy_and_sampled_per_task():
    from seal_envs.evaluation.batched import Limits
    from seal_trainer.models import resolve_model

    sets = {name: tasks[:1] for name, tasks in evaluation_sets("shop").items()}
    result = evaluate_model(resolve_model("tiny"), sets, HeldoutSettings(samples=2, batch_size=4, limits=Limits(16, 2)))
    for name, tasks in sets.items():
        doc = result["sets"][name]
        for mode in ("greedy", "sampled"):
            assert set(doc[mode]["per_task"]) == {t.id for t in tasks} and doc[mode]["n"] == 1
            assert 0.0 <= doc[mode]["mean"] <= 1.0 and doc[mode]["se"] >= 0.0
    assert compare(result, result)["heldout"]["greedy"]["diff"] == 0.0


def _evaluation(rates: dict[str, float]) -> dict:
    per_set = summarize({"greedy": rates, "sampled": rates})
    return {"sets": {"heldout": {**per_set, "tasks": len(rates)}, "ood": {**per_set, "tasks": len(rates)}}}


def test_an_arms_seeds_pool_by_task_before_the_paired_difference(tmp_path: Path, capsys):
    seeds = [_evaluation({"t1": 1.0, "t2": 0.0, "t3": 1.0}), _evaluation({"t1": 0.0, "t2": 0.0, "t3": 1.0})]
    both = pooled(seeds)
    assert both["sets"]["heldout"]["greedy"]["per_task"] == {"t1": 0.5, "t2": 0.0, "t3": 1.0}
    assert both["sets"]["heldout"]["greedy"]["mean"] == pytest.approx(0.5) and both["sets"]["heldout"]["pooled"] == 2
    base = _evaluation({"t1": 0.0, "t2": 0.0, "t3": 0.5})
    assert compare(both, base)["heldout"]["greedy"]["diff"] == pytest.approx(1 / 3)  # (0.5 + 0 + 0.5) / 3
    files = []
    for i, doc in enumerate([*seeds, base]):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(doc))
    assert main(["--compare", f"{files[0]},{files[1]}", str(files[2])]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["heldout"]["greedy"]["diff"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="different 'heldout' tasks"):
        pooled([seeds[0], _evaluation({"t1": 1.0})])


def test_comparison_runs_aggregate_into_curves_and_a_paired_difference(tmp_path: Path):
    cmp = _comparison()
    assert cmp.eval_steps(20, 5) == [0, 5, 10, 15, 20] and cmp.eval_steps(7, 5) == [0, 5, 7]
    args = cmp.parse(["--out", str(tmp_path)])
    assert (args.steps, args.prompts * args.rollouts, len(args.seeds)) == (20, 16, 3)
    a, b = cmp.overrides(args, "vanilla", 1, tmp_path / "r"), cmp.overrides(args, "full", 1, tmp_path / "r")
    assert [x for x in a if x not in b] == ["seal.ablation=vanilla", "trainer.experiment_name=vanilla_s1"]
    assert {"trainer.save_freq=5", "trainer.resume_mode=auto", "trainer.test_freq=-1"} <= set(a)

    # verl truncates its metrics file: each attempt writes its own, a step redone after a resume keeps the last
    run = tmp_path / "run"
    run.mkdir()
    (run / "verl_metrics_0.jsonl").write_text(json.dumps({"step": 1, "data": {"timing_s/step": 1.0,
                                                                              "seal/reward_mean": 0.1}}) + "\n")
    (run / "verl_metrics_1.jsonl").write_text(json.dumps({"step": 1, "data": {"timing_s/step": 2.0,
                                                                              "seal/reward_mean": 0.2}}) + "\n")
    assert cmp.train_record(cmp.read_metrics(run))["1"]["seal/reward_mean"] == 0.2

    tasks = [f"t{i}" for i in range(6)]
    runs = []
    for arm, lift in (("vanilla", 0.0), ("full", 0.25)):
        for seed in (0, 1):
            evals = {0: _evaluation({t: 0.25 for t in tasks}),
                     5: _evaluation({t: min(1.0, 0.25 + lift * (i % 3 > 0) + 0.05 * seed) for i, t in enumerate(tasks)})}
            short, full = cmp.validation(evals)
            train = {str(s): {"seal/reward_mean": 0.3, "seal/informative_groups": 2.0, "seal/groups": 4.0,
                              "timing_s/step": 10.0} for s in range(1, 6)}
            runs.append({"arm": arm, "seed": seed, "steps": 5, "validation": short, "evaluation": full, "train": train})
    agg = cmp.aggregate(runs)
    assert runs[0]["validation"]["heldout"] == {"0": 0.25, "5": 0.25}  # comparison.json's shape, keyed by step
    assert agg["arms"]["full"]["curves"]["heldout"]["sampled"]["5"]["n"] == 2
    d = agg["paired"]["full"]["heldout"]["greedy"]
    assert d["step"] == 5 and d["n"] == 6 and math.isclose(d["diff"], 0.25 * 4 / 6) and d["better"] == 4
    assert agg["arms"]["full"]["per_step"]["3"]["informative_share"]["mean"] == 0.5
    assert "full - vanilla, heldout greedy, step 5: +0.167" in cmp.table(agg)
    cmp.plot(agg, tmp_path / "comparison.png", "test")
    assert (tmp_path / "comparison.png").stat().st_size > 10_000


def test_a_finished_run_is_reused_when_the_script_restarts(tmp_path: Path):
    cmp = _comparison()
    args = cmp.parse(["--out", str(tmp_path), "--steps", "3"])
    run_dir = tmp_path / "runs" / "full_s0"
    run_dir.mkdir(parents=True)
    record = {"arm": "full", "seed": 0, "steps": 3, "settings": cmp.settings_key(args), "marker": 1}
    (run_dir / "record.json").write_text(json.dumps(record))
    assert cmp.run_one(args, "full", 0)["marker"] == 1  # no seal-train started: the record is reused
    later = tmp_path / "runs" / "full_s1"  # a later run finds the start policy in its own config (full_s0 has none)
    later.mkdir()
    (later / "config.yaml").write_text("actor_rollout_ref:\n  model:\n    path: /cache/ws\n")
    assert cmp.start_policy(later) == Path("/cache/ws")
    folders = [run_dir / f"global_step_{s}" / "actor" / sub for s in (1, 3) for sub in ("huggingface", "optim")]
    for folder in folders:
        folder.mkdir(parents=True)
    cmp.prune(run_dir, 3)
    assert [f.exists() for f in folders] == [False, False, True, False]  # only the final policy stays
    other = cmp.parse(["--out", str(tmp_path), "--steps", "3", "--eval-samples", "8"])
    assert cmp.finished_record(other, run_dir) is None and not run_dir.exists()  # other settings: afresh, never mixed


def test_the_trained_tasks_are_those_the_training_file_names_and_get_their_own_curve(tmp_path: Path):
    from seal_envs.spec import load_domain
    from seal_envs.task import write_tasks
    from seal_trainer.data import task_rows, write_rows

    cmp = _comparison()
    split = list(load_domain("shop").split_tasks("train"))
    assert [t.id for t in cmp.trained_tasks(None)] == [t.id for t in split]  # seal-train's default data
    kept = [split[5], split[2]]
    tasks_file = write_tasks(kept, tmp_path / "train_tasks.json")
    write_rows(task_rows(kept, domain="shop", mode="train", tasks_path=str(tasks_file)), tmp_path / "train.parquet")
    assert [t.id for t in cmp.trained_tasks(tmp_path / "train.parquet")] == [split[5].id, split[2].id]
    rollouts = tmp_path / "run" / "rollouts"  # verl's rollout dump names no task: the prompt tells
    rollouts.mkdir(parents=True)
    (rollouts / "1.jsonl").write_text("".join(
        json.dumps({"input": f"<|im_start|>user\n{task.turns[0].user}<|im_end|>", "score": score}) + "\n"
        for task, score in ((kept[0], 1.0), (kept[0], 0.0), (kept[1], 1.0))))
    assert cmp.task_rewards(tmp_path / "run", tuple(kept)) == {"1": {kept[0].id: 0.5, kept[1].id: 1.0}}
    twin = replace(kept[1], id="train_twin")  # the same first message: only the rollout's ground truth tells
    prompt = f"<|im_start|>user\n{twin.turns[0].user}<|im_end|>"
    (rollouts / "2.jsonl").write_text("".join(json.dumps({"input": prompt, "gts": gts, "score": score}) + "\n"
                                              for gts, score in ((twin.id, 0.0), (kept[1].id, 1.0), (None, 1.0))))
    assert cmp.task_rewards(tmp_path / "run", (*kept, twin))["2"] == {twin.id: 0.0, kept[1].id: 1.0}
    (row,) = task_rows([twin], domain="shop", mode="train")
    assert row["reward_model"]["ground_truth"] == twin.id  # what verl's dump writes as ``gts``

    with_trained = _evaluation({"t0": 0.5})
    with_trained["sets"]["trained"] = with_trained["sets"]["heldout"]
    short, full = cmp.validation({0: with_trained, 5: with_trained})
    assert short["trained"] == {"0": 0.5, "5": 0.5} and "sampled" in full["trained"]["5"]
    assert "trained" not in cmp.validation({0: _evaluation({"t0": 0.5})})[0]  # comparison.json keeps its shape
    agg = cmp.aggregate([{"arm": "vanilla", "seed": 0, "steps": 5, "validation": short, "evaluation": full,
                          "train": {}}])
    assert agg["arms"]["vanilla"]["curves"]["trained"]["greedy"]["5"]["mean"] == 0.5
    assert "vanilla         trained  greedy" in cmp.table(agg)


def test_eval_sets_choose_what_each_checkpoint_is_evaluated_on(monkeypatch):
    import seal_envs.evaluation.heldout as heldout

    cmp = _comparison()
    seen = {}
    monkeypatch.setattr(heldout, "evaluate_model", lambda policy, sets, settings: seen.update(sets) or {})
    args = cmp.parse(["--eval-sets", "heldout", "--eval-samples", "2"])
    assert args.eval_sets == ["heldout"] and cmp.settings_key(args)["eval_sets"] == ["heldout"]
    assert "eval_sets" not in cmp.settings_key(cmp.parse([]))  # records written before the option stay valid
    trained = tuple(evaluation_sets("shop")["heldout"][:1])
    cmp._evaluate_policy(Path("p"), args.eval_sets, None, 2, 0.7, 1024, trained)
    assert sorted(seen) == ["heldout", "trained"] and len(seen["heldout"]) == 24
    seen.clear()
    cmp._evaluate_policy(Path("p"), cmp.parse([]).eval_sets, 3, 2, 0.7, 1024, ())
    assert sorted(seen) == ["heldout", "ood"] and len(seen["ood"]) == 3  # the default: both, as before
    seen.clear()
    cmp._evaluate_policy(Path("p"), cmp.parse(["--eval-sets", "heldout", "test"]).eval_sets, None, 0, 0.7, 1024, ())
    assert sorted(seen) == ["heldout", "test"] and len(seen["test"]) == 72
