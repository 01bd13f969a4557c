"""Dataset files for verl: one parquet row per SEAL task, routed to the ``seal_tool_env`` agent loop.

verl's ``RLHFDataset`` needs a chat ``prompt`` column (used for length filtering and as ``raw_prompt``); the
agent loop ignores it and renders the env's own first observation. The ``seal_*`` columns tell the agent
loop which env to build: ``seal_domain``, ``seal_task_id``, ``seal_mode`` (``train`` rows see the evolving
interface, ``eval`` rows the original one), ``seal_sandbox``, ``seal_env_id``, ``seal_tasks``, ``seal_seed``.
``reward_model.ground_truth`` is the task id, as verl's convention has it: the task's executable verifier is the
ground truth, and verl's rollout dump (``trainer.rollout_data_dir``) then names each rollout's task.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seal_trainer.agent_loop import AGENT_NAME


def task_rows(tasks: Sequence[Any], *, domain: str, mode: str, sandbox: str | None = None,
              env_id: str | None = None, tasks_path: str | None = None, seed: int = 0) -> list[dict[str, Any]]:
    rows = []
    for i, task in enumerate(tasks):
        rows.append({
            "data_source": f"seal/{domain}",
            "agent_name": AGENT_NAME,
            "prompt": [{"role": "user", "content": task.turns[0].user}],
            "seal_domain": domain,
            "seal_task_id": task.id,
            "seal_mode": mode,
            "seal_sandbox": sandbox or "",
            "seal_env_id": env_id or "",
            "seal_tasks": tasks_path or "",
            "seal_seed": seed + i,
            "seal_category": task.category,
            "reward_model": {"style": "seal", "ground_truth": task.id},
            "extra_info": {"index": i, "task_id": task.id},
        })
    return rows


def write_rows(rows: list[dict[str, Any]], path: str | Path) -> Path:
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


def split_tasks(tasks: Sequence[Any], n_train: int | None, n_val: int | None):
    """Deterministic train/val split, spread evenly over categories (as the paper's BFCL split: 100/100 each)."""
    cats: dict[str, list[Any]] = {}
    for t in tasks:
        cats.setdefault(t.category, []).append(t)
    train, val = [], []
    k = len(cats)
    for items in cats.values():
        nt = (n_train // k if n_train else (len(items) + 1) // 2) or 1
        train += items[:nt]
        rest = items[nt:]
        nv = (n_val // k if n_val else len(rest)) or (1 if rest else 0)
        val += rest[:nv]
    if n_train:
        train = train[:n_train]
    if n_val:
        val = val[:n_val]
    return train, val


MIN_SPLIT_TASKS = 8  # below this, held-out success moves in steps of more than 12 points


class SplitTooSmall(ValueError):
    """A split that training cannot run on."""


class SmallSplitWarning(UserWarning):
    """A split that runs, but on fewer tasks than make a signal (and than asked for)."""


def check_split(domain: str, train: int, val: int, *, n_train: int | None, n_val: int | None,
                batch_size: int) -> None:
    """Raise ``SplitTooSmall`` when training cannot run; warn when a split has fewer than ``MIN_SPLIT_TASKS``
    tasks and fewer than asked for (``n_train`` / ``n_val`` cap a split and spread it evenly over categories)."""
    fix = "add tasks to the domain (tasks.json, or a task_splits function)"
    if train < batch_size:  # verl drops the incomplete last batch: no step would run
        raise SplitTooSmall(f"domain {domain!r} gives {train} training task(s), fewer than data.train_batch_size="
                            f"{batch_size}: {fix}, or lower data.train_batch_size")
    if val == 0:
        raise SplitTooSmall(f"domain {domain!r} leaves no held-out task to validate on: {fix}")
    short = [f"{name}: {got} task(s)" + (f" of the {asked} asked for" if asked else "")
             for name, got, asked in (("training", train, n_train), ("held-out", val, n_val))
             if got < MIN_SPLIT_TASKS and not (asked and got >= asked)]
    if short:
        warnings.warn(f"domain {domain!r} is small ({'; '.join(short)}); fewer than {MIN_SPLIT_TASKS} tasks in a "
                      f"split make its success rate noise: {fix}", SmallSplitWarning, stacklevel=3)


def write_domain_dataset(domain: str, out_dir: str | Path, *, n_train: int | None = None, n_val: int | None = None,
                         sandbox: str | None = None, env_id: str | None = None,
                         tasks_path: str | None = None, batch_size: int = 1) -> tuple[Path, Path]:
    """Write ``train.parquet`` / ``val.parquet`` for a domain's tasks; returns their paths (see ``check_split``)."""
    from seal_envs.spec import load_domain
    from seal_envs.task import load_tasks

    spec = load_domain(domain)
    out = Path(out_dir)
    common = dict(domain=domain, sandbox=sandbox, env_id=env_id)
    own_split = bool(spec.task_splits) and not tasks_path  # the domain's own fixed split (e.g. BFCL's split.json)
    if own_split:
        train, val = list(spec.split_tasks("train")), list(spec.split_tasks("eval"))
        train = split_tasks(train, n_train, None)[0] if n_train else train  # n per split, spread over categories
        val = split_tasks(val, n_val, None)[0] if n_val else val
    else:
        train, val = split_tasks(load_tasks(tasks_path or spec.root), n_train, n_val)
    check_split(domain, len(train), len(val), n_train=n_train, n_val=n_val, batch_size=batch_size)
    if own_split and not env_id:  # no registered env decides the tasks: the rows name a tasks file written beside them
        return (_write_split(train, out, "train", common), _write_split(val, out, "val", common))
    return (write_rows(task_rows(train, mode="train", tasks_path=tasks_path, **common), out / "train.parquet"),
            write_rows(task_rows(val, mode="eval", seed=10_000, tasks_path=tasks_path, **common), out / "val.parquet"))


def _write_split(tasks: list[Any], out: Path, name: str, common: dict[str, Any]) -> Path:
    from seal_envs.task import write_tasks

    path = str(write_tasks(tasks, out / f"{name}_tasks.json").resolve())
    mode, seed = ("train", 0) if name == "train" else ("eval", 10_000)
    return write_rows(task_rows(tasks, mode=mode, seed=seed, tasks_path=path, **common), out / f"{name}.parquet")


__all__ = ["MIN_SPLIT_TASKS", "SmallSplitWarning", "SplitTooSmall", "check_split", "split_tasks", "task_rows",
           "write_domain_dataset", "write_rows"]
