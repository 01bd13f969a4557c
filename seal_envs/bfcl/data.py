"""Where bfcl-eval keeps the BFCL V3 multi-turn data, read at run time (nothing of it is copied into SEAL)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import bfcl_eval
from bfcl_eval.constants.executable_backend_config import (
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    STATELESS_CLASSES,
)

from seal_envs.bfcl.backends import ADAPTED

DATA_DIR = Path(bfcl_eval.__file__).parent / "data"
CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
"""The four BFCL V3 multi-turn categories (200 tasks each)."""
BACKENDS = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot", "TravelAPI",
            "VehicleControlAPI")
"""The eight backend classes of BFCL V3 multi-turn (bfcl-eval also ships V4 memory/web-search classes)."""


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def _data_file(category: str, answers: bool = False) -> Path:
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL multi-turn category {category!r}; choose from {', '.join(CATEGORIES)}")
    # bfcl-eval 2026.x ships the V3 multi-turn sets under the V4 file prefix (the data is unchanged)
    name = f"BFCL_v4_multi_turn_{category}.json"
    return DATA_DIR / "possible_answer" / name if answers else DATA_DIR / name


@cache
def entries(category: str) -> tuple[dict[str, Any], ...]:
    """BFCL's test entries of a category (questions, initial config, involved classes, missed functions)."""
    return tuple(_read_jsonl(_data_file(category)))


@cache
def answers(category: str) -> dict[str, list[list[str]]]:
    """Ground truth per entry id: per turn, BFCL's python-call strings."""
    return {a["id"]: a["ground_truth"] for a in _read_jsonl(_data_file(category, answers=True))}


@cache
def function_docs(backend: str) -> tuple[dict[str, Any], ...]:
    """BFCL's function docs of one backend class, in BFCL's order."""
    return tuple(_read_jsonl(DATA_DIR / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[backend]))


def class_path(backend: str) -> str:
    """``module:Class`` our sandbox instantiates for a BFCL backend (an adapter where one is needed)."""
    if backend in ADAPTED:
        return f"{ADAPTED[backend].__module__}:{backend}"
    return f"{CLASS_FILE_PATH_MAPPING[backend]}:{backend}"


def is_stateless(backend: str) -> bool:
    """BFCL never loads a scenario into stateless classes (MathAPI)."""
    return backend in STATELESS_CLASSES
