"""seal_trainer.data: verl parquet rows from a domain's tasks, honouring a domain's own fixed split."""

import pandas as pd

from seal_trainer.data import write_domain_dataset


def test_a_tasks_json_is_split_into_disjoint_train_and_eval_rows(tmp_path):
    from seal_envs.spec import load_domain

    bundled = str(load_domain("shop").root / "tasks.json")
    train, val = (pd.read_parquet(p) for p in write_domain_dataset("shop", tmp_path, n_train=6, n_val=3,
                                                                   tasks_path=bundled))
    assert len(train) == 6 and len(val) == 3
    assert not set(train.seal_task_id) & set(val.seal_task_id)
    assert set(train.seal_mode) == {"train"} and set(val.seal_mode) == {"eval"}
    assert set(train.agent_name) == {"seal_tool_env"}


def test_a_domain_declaring_task_splits_gets_its_own_split(tmp_path):
    from seal_envs.bfcl.split import split_ids

    train, val = (pd.read_parquet(p) for p in write_domain_dataset("bfcl", tmp_path, n_train=8, n_val=8))
    assert len(train) == 8 and len(val) == 8
    assert set(train.seal_task_id) <= set(split_ids("train")) and set(val.seal_task_id) <= set(split_ids("eval"))
    assert len({i.rsplit("_", 1)[0] for i in train.seal_task_id}) == 4  # spread over BFCL's 4 categories


def test_split_tasks_without_an_env_id_travel_in_a_tasks_file_the_workers_load(tmp_path):
    from seal_envs.env import ToolUseEnv
    from seal_trainer.agent_loop import spec_from_row

    train, val = (pd.read_parquet(p) for p in write_domain_dataset("shop", tmp_path, n_train=3, n_val=3))
    assert len(train) == 3 and len(val) == 3 and set(train.seal_task_id) < {f"train_{c}_{i:04d}"
                                                                          for c in ("base", "miss_param", "miss_func")
                                                                          for i in range(32)}
    row = val.iloc[0].to_dict()
    spec = spec_from_row(row)
    env = ToolUseEnv(domain=spec.domain, tasks=spec.tasks, mode="eval", sandbox="inprocess")
    obs, info = env.reset(options={"task_id": row["seal_task_id"]})
    assert info["task_id"] == row["seal_task_id"] and obs[-1]["content"] == row["prompt"][0]["content"]
    env.close()


def small_domain(tmp_path, count: int) -> str:
    from seal_envs.task import load_tasks, write_tasks

    return str(write_tasks([t for t in load_tasks("shop") if t.category == "base"][:count], tmp_path / "tasks.json"))


def test_a_small_domain_warns_with_the_fix(tmp_path):
    import pytest

    from seal_trainer.data import SmallSplitWarning

    with pytest.warns(SmallSplitWarning, match=r"training: 3 task\(s\); held-out: 2 task\(s\).*add tasks"):
        write_domain_dataset("shop", tmp_path, tasks_path=small_domain(tmp_path, 5))
    with pytest.warns(SmallSplitWarning, match=r"held-out: 2 task\(s\) of the 12 asked for"):
        write_domain_dataset("shop", tmp_path, n_train=3, n_val=12, tasks_path=small_domain(tmp_path, 5))


def test_a_split_training_cannot_run_on_is_an_error(tmp_path):
    import pytest

    from seal_trainer.data import SplitTooSmall

    with pytest.raises(SplitTooSmall, match="3 training task.*data.train_batch_size=4"):
        write_domain_dataset("shop", tmp_path, tasks_path=small_domain(tmp_path, 5), batch_size=4)
    with pytest.raises(SplitTooSmall, match="no held-out task"):
        write_domain_dataset("shop", tmp_path, tasks_path=small_domain(tmp_path, 1))


def test_the_embedded_default_split_is_quiet(tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train, val = write_domain_dataset("shop", tmp_path, n_val=12, batch_size=2)
    assert (len(pd.read_parquet(train)), len(pd.read_parquet(val))) == (32, 8)  # n_val caps and spreads: 4 base, 2 miss_param, 2 miss_func
