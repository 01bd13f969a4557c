"""The paper's 400/400 train/eval split of BFCL V3 multi-turn, by a seeded, documented rule.

Rule: per category, sort the entry ids by their numeric suffix, shuffle them with ``random.Random(2605)``
(a fresh generator per category), and put the first 100 in train and the other 100 in eval. The result is
shipped as ``split.json``; ``python -m seal_envs.bfcl.split`` regenerates it and a test checks it is current.
"""

from __future__ import annotations

import json
import random
import sys
from functools import cache
from pathlib import Path
from typing import Literal

SEED = 2605
TRAIN_PER_CATEGORY = 100
SPLIT_FILE = Path(__file__).resolve().parent / "split.json"
Split = Literal["train", "eval", "all"]


def compute_split() -> dict[str, dict[str, list[str]]]:
    """{"train"|"eval": {category: [ids]}} from bfcl-eval's data, by the rule above."""
    from seal_envs.bfcl.data import CATEGORIES, entries

    split: dict[str, dict[str, list[str]]] = {"train": {}, "eval": {}}
    for category in CATEGORIES:
        ids = sorted((e["id"] for e in entries(category)), key=lambda i: int(i.rsplit("_", 1)[1]))
        random.Random(SEED).shuffle(ids)
        split["train"][category] = sorted(ids[:TRAIN_PER_CATEGORY], key=lambda i: int(i.rsplit("_", 1)[1]))
        split["eval"][category] = sorted(ids[TRAIN_PER_CATEGORY:], key=lambda i: int(i.rsplit("_", 1)[1]))
    return split


def render(split: dict[str, dict[str, list[str]]]) -> str:
    doc = {"rule": __doc__.split("\n\n")[1].replace("\n", " "), "seed": SEED, **split}
    return json.dumps(doc, indent=1) + "\n"


@cache
def split_ids(split: Split) -> frozenset[str]:
    """Task ids of a split, read from the shipped ``split.json``."""
    if split not in ("train", "eval", "all"):
        raise ValueError(f"split must be 'train', 'eval' or 'all', not {split!r}")
    doc = json.loads(SPLIT_FILE.read_text())
    parts = ("train", "eval") if split == "all" else (split,)
    return frozenset(i for part in parts for ids in doc[part].values() for i in ids)


def main() -> int:
    SPLIT_FILE.write_text(render(compute_split()))
    print(f"wrote {SPLIT_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
