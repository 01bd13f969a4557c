"""A verl checkpoint's Hugging Face folder as the trained policy, LoRA runs included.

verl 0.9.1 writes a LoRA run's ``actor/huggingface`` folder with the PEFT model's state dict (``base_model.model.``
names, ``base_layer``, ``lora_A`` and ``lora_B`` tensors) under the plain model's config. ``from_pretrained`` then
finds none of the weights it expects and initialises all of them at random, with a warning only: an evaluation of
such a folder measures a random model. ``policy_folder`` merges the adapters into the weights (W + alpha / r * B A,
PEFT's scaling) once, in place, so that the folder loads as the trained policy anywhere.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

PEFT_PREFIX = "base_model.model."
LORA_META = "lora_train_meta.json"  # verl writes it beside a LoRA run's checkpoint: r, lora_alpha
_ADAPTER = re.compile(r"\.lora_(A|B)\.default\.weight$")


def policy_folder(actor_dir: Path) -> Path | None:
    """``actor_dir``'s ``huggingface`` folder if it holds weights (LoRA adapters merged into them), else None."""
    folder = actor_dir / "huggingface"
    if not [*folder.glob("*.safetensors"), *folder.glob("pytorch_model*.bin")]:
        return None
    meta = actor_dir / LORA_META
    if meta.exists():
        merge_lora_weights(folder, json.loads(meta.read_text()))
    return folder


def merge_lora_weights(folder: Path, meta: dict) -> bool:
    """Rewrite ``folder``'s weights (safetensors or ``pytorch_model*.bin``) as one safetensors file with the LoRA
    adapters merged and plain parameter names; False if they hold plain names already (a merged or
    full-parameter checkpoint)."""
    import torch
    from safetensors.torch import load_file, save_file

    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(file) if file.suffix == ".safetensors"
                     else torch.load(file, map_location="cpu", weights_only=True))
    if not any(key.startswith(PEFT_PREFIX) for key in state):
        return False
    unmergeable = [key for key in state if ".lora_" in key and not _ADAPTER.search(key)]
    if unmergeable:
        raise ValueError(f"{folder}: LoRA tensors SEAL cannot merge (only lora_A/lora_B of linear layers): "
                         f"{unmergeable[:3]}")
    scale = float(meta["lora_alpha"]) / float(meta["r"])
    merged = {}
    for key, tensor in state.items():
        name = key.removeprefix(PEFT_PREFIX)
        if _ADAPTER.search(name):
            continue
        if ".base_layer." in name:
            module, param = name.split(".base_layer.")
            if param == "weight":
                a, b = (state.get(f"{PEFT_PREFIX}{module}.lora_{m}.default.weight") for m in "AB")
                if a is None or b is None:
                    raise ValueError(f"{folder}: {module} has a base_layer but no lora_A/lora_B pair")
                tensor = (tensor.float() + scale * (b.float() @ a.float())).to(tensor.dtype)
            name = f"{module}.{param}"
        merged[name] = tensor.contiguous()
    staged = folder / "model.safetensors.merging"
    save_file(merged, str(staged), metadata={"format": "pt"})
    for file in files:
        file.unlink()
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        (folder / index).unlink(missing_ok=True)
    os.replace(staged, folder / "model.safetensors")
    return True
