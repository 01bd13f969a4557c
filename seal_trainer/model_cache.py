"""Model folders SEAL builds once and reuses: the tiny model, the converted GGUF, warm starts.

Each build is keyed by a recipe hash stored in the folder's ``seal_recipe.json``; a folder is reused only when
that marker names the same recipe. A build is written to a temporary sibling and renamed into place, so a build
that was killed halfway never looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

RECIPE_FILE = "seal_recipe.json"


def default_cache_dir() -> Path:
    """Where ``seal-train`` keeps the models it builds: ``$SEAL_CACHE_DIR`` or ``~/.cache/seal``."""
    return Path(os.environ.get("SEAL_CACHE_DIR", Path.home() / ".cache" / "seal"))


def is_built(folder: Path, recipe: str) -> bool:
    """Whether ``folder`` holds a complete build of ``recipe``."""
    marker = folder / RECIPE_FILE
    return marker.exists() and json.loads(marker.read_text()).get("recipe") == recipe


def save_built(model: Any, tokenizer: Any, folder: Path, marker: dict[str, Any],
               files: dict[str, str] | None = None) -> Path:
    """Write ``model``, ``tokenizer``, extra text ``files`` and the recipe ``marker`` (which holds ``"recipe"``)
    as ``folder``, replacing an older build there."""
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    for name, text in (files or {}).items():
        (tmp / name).write_text(text)
    (tmp / RECIPE_FILE).write_text(json.dumps(marker))
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)
    return folder


__all__ = ["RECIPE_FILE", "default_cache_dir", "is_built", "save_built"]
