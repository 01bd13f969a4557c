"""The user docs build in MkDocs' strict mode: a broken link, a missing page or a docstring that the API
reference cannot render fails the suite with MkDocs' own output. mkdocs and mkdocstrings-python come with the
``docs`` extra, which scripts/install.sh installs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_strict(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    for page in ("index.html", "environments/index.html", "labels/index.html", "api/env/index.html"):
        assert (site / page).is_file(), f"{page} was not built"
    api = (site / "api" / "env" / "index.html").read_text()
    assert "ToolUseEnv" in api and "max_steps_per_turn" in api, "the API reference rendered no docstrings"
