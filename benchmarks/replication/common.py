"""Shared pieces of the replication benchmark: the task sets, paths, small helpers.

Task sets (``task_set``): three disjoint sets drawn from the procedural generator in ``synthetic.py`` with
fixed seeds, written to ``results/tasks/<name>.json`` (deterministic, rebuilt when missing):

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
TASK_SETS: dict[str, tuple[int, int]] = {"heldout": (3, 24), "train": (2, 32), "sft": (1, 400)}  # name -> (seed, n)


def task_set_path(name: str) -> Path:
    """``results/tasks/<name>.json`` for a synthetic set (generated, disjoint from the sets before it)."""
    out = RESULTS / "tasks"
    if name not in TASK_SETS:
        raise KeyError(f"unknown task set {name!r}; choose from {sorted(TASK_SETS)} or 'bundled'")
    paths = {n: out / f"{n}.json" for n in TASK_SETS}
    if not all(p.exists() for p in paths.values()):
        import synthetic

        seen: set[str] = set()
        for n, (seed, size) in TASK_SETS.items():  # heldout first: the later sets exclude its tasks
            docs = synthetic.generate(size, seed, prefix=n, exclude=seen)
            seen |= {synthetic.fingerprint(d) for d in docs}
            synthetic.write_tasks(docs, paths[n])
    return paths[name]


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
