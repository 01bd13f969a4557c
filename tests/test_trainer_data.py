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
