"""SEAL trainer: our environments inside verl's GRPO pipeline (agent loop, reweighting, closed loop)."""
