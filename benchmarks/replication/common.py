"""Shared pieces of the replication benchmark: the task sets, paths, small helpers.

Task sets (``task_set``): the shop domain's three fixed procedural splits (``tool_specs/shop/synthetic.py``),
written to ``results/tasks/<name>.json`` (deterministic, rebuilt when missing):

- ``sft``: 400 tasks whose executed ground truth is the warm start's demonstrations;
- ``train``: 32 tasks the RL arms train on (never in the warm start);
- ``heldout``: 24 tasks for evaluation with the unchanged interface (never trained on, by SFT or RL).

Disjoint means no two sets share a task with the same state and turns; they share the generator's templates,
so ``heldout`` measures in-distribution generalisation. The 36 hand-written bundled ``shop`` tasks
(``bundled``) are the out-of-distribution check: no model here is trained on them.
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
TASK_SETS = {"heldout": "eval", "train": "train", "sft": "sft"}  # set name -> the shop domain's split


def task_set_path(name: str) -> Path:
    """``results/tasks/<name>.json`` for a synthetic set (generated, disjoint from the sets before it)."""
    if name not in TASK_SETS:
        raise KeyError(f"unknown task set {name!r}; choose from {sorted(TASK_SETS)} or 'bundled'")
    path = RESULTS / "tasks" / f"{name}.json"
    if not path.exists():
        from tool_specs.shop import synthetic

        synthetic.write_tasks(list(synthetic.split_documents(TASK_SETS[name])), path)
    return path


def task_set(name: str):
    """The tasks of a set: a synthetic one (``sft``, ``train``, ``heldout``) or the 36 ``bundled`` tasks."""
    from seal_envs.spec import load_domain
    from seal_envs.task import load_tasks

    return load_tasks(load_domain(DOMAIN).root if name == "bundled" else task_set_path(name))


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
