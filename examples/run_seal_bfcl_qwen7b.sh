#!/usr/bin/env bash
# SEAL on BFCL V3 multi-turn with Qwen2.5-7B-Instruct, 4 GPUs (the paper's setting).
# Needs: a CUDA build of torch + verl[vllm] on the GPU machine, the model in the HF cache (or a local path),
# bfcl-eval installed, a Docker daemon (DOCKER_HOST) for the sandboxes.
# Ablations: append seal.ablation=vanilla | no_evolution | no_reweighting | no_closed_loop.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-Qwen/Qwen2.5-7B-Instruct}"
exec seal-train --config examples/seal_bfcl_qwen7b.yaml \
  actor_rollout_ref.model.path="$MODEL" \
  trainer.experiment_name="bfcl_$(basename "$MODEL")_${ABLATION:-full}" \
  seal.ablation="${ABLATION:-full}" "$@"
