"""Task-level statistics for evaluations that must resolve a change: the unit is the task, not the episode.

A policy's success on a task set is the mean over tasks of its per-task pass rate (1 episode greedy, or the share
of k sampled episodes that passed); its standard error is over tasks (sample standard deviation / sqrt(n)), since
tasks, not samples of one task, are what a held-out set draws. Two policies are compared *paired by task*: the
per-task differences carry the task difficulty out, so the same n resolves a smaller change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist


def mean_se(values: Sequence[float]) -> dict[str, float]:
    """Mean, standard error of the mean and n of per-task values (se 0 for fewer than 2 tasks)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_se needs at least one task's value")
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return {"mean": mean, "se": math.sqrt(var / n), "n": n}


def paired_difference(a: Mapping[str, float], b: Mapping[str, float], confidence: float = 0.95) -> dict:
    """``a - b`` paired by task over the tasks both evaluated: mean difference, its standard error, the
    t-interval at ``confidence``, and the number of tasks on which a is better / worse."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("the two evaluations share no task: compare results of the same task set")
    from scipy.stats import t as student_t  # the train extra's (verl's) dependency

    diffs = [float(a[t]) - float(b[t]) for t in common]
    summary = mean_se(diffs)
    half = student_t.ppf(0.5 + confidence / 2, summary["n"] - 1) * summary["se"] if summary["n"] > 1 else math.inf
    return {"diff": summary["mean"], "se": summary["se"], "n": summary["n"], "confidence": confidence,
            "ci": [summary["mean"] - half, summary["mean"] + half],
            "better": sum(d > 0 for d in diffs), "worse": sum(d < 0 for d in diffs)}


def mean_by_task(tables: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per task that every table holds, its pass rate averaged over the tables (one arm's seeds: the paired
    comparison's unit is the task)."""
    tasks = set.intersection(*(set(t) for t in tables)) if tables else set()
    return {t: sum(float(table[t]) for table in tables) / len(tables) for t in sorted(tasks)}


def detectable_difference(se: float, confidence: float = 0.95, power: float = 0.8) -> float:
    """The smallest true difference a test with standard error ``se`` detects at ``confidence`` (two-sided) with
    probability ``power`` (normal approximation): what a decisive answer needs the effect, or the se, to be."""
    z = NormalDist().inv_cdf
    return (z(0.5 + confidence / 2) + z(power)) * se


__all__ = ["detectable_difference", "mean_by_task", "mean_se", "paired_difference"]
