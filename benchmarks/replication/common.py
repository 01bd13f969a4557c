"""Shared pieces of the replication benchmark: the fixed task split, paths, small helpers.

Task split (fixed, shipped here as constants): within each category of the bundled ``shop`` domain, task ids
are sorted and every third one (positions 2, 5, 8, ... counting from 0) is held out for evaluation; the rest
train. That stratifies the held-out set by category: base 7/23, miss_param 2/7, miss_func 2/6 -> 11 held out,
25 training tasks. ``check_split()`` recomputes the rule from ``tasks.json`` and fails if the constants drift.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RESULTS = HERE / "results"
DOMAIN = "shop"

EVAL_TASK_IDS: tuple[str, ...] = (
    "shop_base_003", "shop_base_006", "shop_base_009", "shop_base_012", "shop_base_015", "shop_base_018",
    "shop_base_021",
    "shop_miss_func_003", "shop_miss_func_006",
    "shop_miss_param_003", "shop_miss_param_006",
)


def split_rule(tasks) -> tuple[list[str], list[str]]:
    """(train ids, eval ids) by the documented rule: per category, sorted ids, every third held out."""
    by_cat: dict[str, list[str]] = {}
    for t in tasks:
        by_cat.setdefault(t.category, []).append(t.id)
    train, held = [], []
    for cat in sorted(by_cat):
        for i, tid in enumerate(sorted(by_cat[cat])):
            (held if i % 3 == 2 else train).append(tid)
    return sorted(train), sorted(held)


def load_shop_tasks():
    from seal_envs.spec import load_domain
    from seal_envs.task import load_tasks

    return load_tasks(load_domain(DOMAIN).root)


def check_split(tasks=None) -> tuple[list, list]:
    """(train tasks, eval tasks); raises if ``EVAL_TASK_IDS`` no longer matches the rule on ``tasks.json``."""
    tasks = list(tasks if tasks is not None else load_shop_tasks())
    _, held = split_rule(tasks)
    if sorted(EVAL_TASK_IDS) != held:
        raise RuntimeError(f"held-out split drifted from tasks.json: constant {sorted(EVAL_TASK_IDS)} vs rule {held}")
    held_set = set(EVAL_TASK_IDS)
    return [t for t in tasks if t.id not in held_set], [t for t in tasks if t.id in held_set]


def set_threads(n: int | None = None) -> None:
    import torch

    torch.set_num_threads(int(n or os.environ.get("SEAL_BENCH_THREADS", 2)))


@contextmanager
def timer(store: dict, key: str):
    t0 = time.perf_counter()
    try:
        yield
    finally:
        store[key] = store.get(key, 0.0) + time.perf_counter() - t0


def write_json(path: Path, doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str))
    return path


def ensure_on_path() -> None:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
