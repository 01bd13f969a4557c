"""The BFCL domain's fixed task splits (``task_splits`` in tools.json): bfcl-eval's entries split by
``seal_envs/bfcl/split.json``. A domain's split function must live in its own folder."""

from seal_envs.bfcl import bfcl_tasks

__all__ = ["bfcl_tasks"]
