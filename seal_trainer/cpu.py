"""Run verl 0.9.1 on a machine without GPUs (tests, CI, the default ``seal-train`` run).

Nothing here is active on a GPU machine. Importing the module only *registers* two things with verl, which
is harmless anywhere:

- a ``cpu`` platform (``verl.plugin.platform.PlatformRegistry``): device ``cpu``, collective backend
  ``gloo``, a device module whose memory/stream calls are no-ops, a flops-counter device name ``CPU``;
- a rollout backend ``hf`` (``rollout.name=hf``) that serves generation with Hugging Face ``generate()``:
  ``HFServerAdapter`` lives in the hybrid actor worker and forwards weight updates to ``HFRolloutServer``,
  a Ray actor (one per replica) that holds a copy of the policy and answers the agent loop's token-in /
  token-out ``generate`` calls (verl itself registers only vllm/sglang/trtllm).

``activate()`` turns CPU mode on for this process and the Ray workers it starts: ``VERL_PLATFORM=cpu``,
``VERL_ENGINE_DEVICE=cpu`` (the CPU platform registers verl's FSDP engines for ``cpu``, the language model's as
``seal_trainer.shared_prefix.SharedPrefixEngine``: a group's prompt goes forward once, logits only where the loss
reads them, no compute for zero-advantage rows), and ``cpu_overrides()`` gives the config changes: FSDP2 with sdpa attention (block-wise in packed updates), one fake
Ray GPU (``ray_init.num_gpus=1``) so placement groups resolve, the core count (at least 8 slots), one TransferQueue storage
unit, the ``hf`` rollout, no torch.compile, fp32 weights computing in bf16 where the CPU has bf16 units (else fp32).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch

from seal_envs.evaluation.batch_generate import GenerationQueue, Sampling, compute_dtype, model_generator
from seal_envs.prefix_cache import DEFAULT_MAX_BYTES
from seal_trainer.shared_prefix import PACKED_ATTENTION

logger = logging.getLogger(__name__)

# OMP_WAIT_POLICY=PASSIVE: an OpenMP thread that reaches a barrier sleeps instead of spinning. The run's processes
# (rollout server, actor, agent loops, tools) share a few cores; a spinning thread holds the core its partner
# needs, which then finishes its share only at the next time slice: a 16 x 576 x 1536 matmul beside one busy
# process took 15 ms with spinning threads and 0.6 ms with passive ones (benchmarks/README.md, "OpenMP waiting").
CPU_ENV = {"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cpu", "TOKENIZERS_PARALLELISM": "false",
           "RAY_DEDUP_LOGS": "0", "OMP_NUM_THREADS": str(os.cpu_count() or 1), "OMP_WAIT_POLICY": "PASSIVE"}


RAY_MIN_CPU_SLOTS = 8

FP32_COMPUTE = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
BF16_COMPUTE = "{param_dtype:bf16,reduce_dtype:fp32,buffer_dtype:fp32}"  # fp32 master weights, as verl's default


def gpu_available() -> bool:
    """True where CUDA devices exist (then this module stays inactive)."""
    return torch.cuda.is_available()


def activate() -> dict[str, str]:
    """Switch this process (and, through the environment, its Ray workers) to CPU mode."""
    os.environ.update(CPU_ENV)
    return dict(CPU_ENV)


def cpu_overrides(num_cpus: int | None = None) -> list[str]:
    """Hydra overrides that make verl's ppo_trainer config run on CPU (see DESIGN.md section 2).

    Ray gets the machine's core count (``num_cpus``, default ``os.cpu_count()``), but at least
    ``RAY_MIN_CPU_SLOTS``: Ray's CPUs are scheduling slots, and verl's actors reserve more than two (a placement
    group bundle of 3 for the colocated workers, the task runner, TransferQueue's controller and storage);
    with fewer, placement never resolves and the run hangs. Torch threads are set by ``OMP_NUM_THREADS``."""
    num_cpus = max(num_cpus or os.cpu_count() or 1, RAY_MIN_CPU_SLOTS)
    compute = BF16_COMPUTE if compute_dtype() == "bfloat16" else FP32_COMPUTE
    env = ",".join(f"{k}:'{v}'" for k, v in CPU_ENV.items())
    return [
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "+ray_kwargs.ray_init.num_gpus=1",
        f"ray_kwargs.ray_init.num_cpus={num_cpus}",
        "+ray_kwargs.ray_init.include_dashboard=False",  # its nine processes hold about 1 GB
        f"+ray_kwargs.ray_init.runtime_env.env_vars={{{env}}}",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.dtype={compute_dtype()}",
        "actor_rollout_ref.rollout.free_cache_engine=False",
        "actor_rollout_ref.rollout.load_format=auto",
        # with LoRA (model.lora_rank > 0) the hf rollout loads merged full weights; adapter-only syncs would raise
        "actor_rollout_ref.model.lora.merge=True",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.actor.fsdp_config.model_dtype=float32",
        "actor_rollout_ref.ref.fsdp_config.model_dtype=float32",
        # bf16 compute only where the CPU has bf16 units (about 2x faster on SmolLM2 there; 4-10x slower without:
        # benchmarks/cpu_dtype_bench.py); the weights and the optimizer stay fp32 either way
        f"+actor_rollout_ref.actor.fsdp_config.mixed_precision={compute}",
        f"+actor_rollout_ref.ref.fsdp_config.mixed_precision={compute}",
        "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.ref.use_torch_compile=False",
        f"+actor_rollout_ref.model.override_config.attn_implementation={PACKED_ATTENTION}",
        "actor_rollout_ref.model.use_remove_padding=False",
    ]


# ----------------------------------------------------------------------------------------- platform


def _noop(*args, **kwargs):
    return None


class _CPUDeviceModule(SimpleNamespace):
    """Stands in for ``torch.cuda``: device queries answer for one CPU "device", memory calls are no-ops (the
    attributes given below). Any other CUDA call is one ``torch.cpu`` has, or else a no-op announced by one
    warning line per name, so that a call that would matter is never dropped silently."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name not in _ANNOUNCED_NOOPS:
            _ANNOUNCED_NOOPS.add(name)
            logger.warning("CPU platform: verl called torch.cuda-style %r, which SEAL's CPU shim does not implement; "
                           "it does nothing here (seal_trainer/cpu.py)", name)
        return _noop


_ANNOUNCED_NOOPS: set[str] = set()


def _mem_get_info(*_):
    try:
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total
    except Exception:
        return 64 << 30, 64 << 30


CPU_DEVICE = _CPUDeviceModule(
    is_available=lambda: True, device_count=lambda: 1, current_device=lambda: "cpu", set_device=_noop,
    synchronize=_noop, empty_cache=_noop, ipc_collect=_noop, manual_seed=torch.manual_seed,
    manual_seed_all=torch.manual_seed, get_rng_state=torch.get_rng_state, set_rng_state=torch.set_rng_state,
    memory_allocated=lambda *a, **k: 0, memory_reserved=lambda *a, **k: 0, max_memory_allocated=lambda *a, **k: 0,
    max_memory_reserved=lambda *a, **k: 0, reset_peak_memory_stats=_noop, mem_get_info=_mem_get_info,
    get_device_name=lambda *a: "CPU", set_per_process_memory_fraction=_noop, current_stream=lambda *a: None,
)


def _dedup_backend_strings() -> None:
    """verl asks for ``f"cpu:gloo,{device}:{backend}"``, i.e. ``cpu:gloo,cpu:gloo`` here; torch rejects the
    duplicate. Installed only once the CPU platform is instantiated (VERL_PLATFORM=cpu)."""
    import torch.distributed as dist

    if getattr(dist.init_process_group, "_seal_cpu", False):
        return
    original = dist.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        if isinstance(backend, str) and "," in backend:
            parts = list(dict.fromkeys(p.strip() for p in backend.split(",")))
            backend = "gloo" if all(p.endswith(":gloo") for p in parts) else ",".join(parts)
        return original(backend, *args, **kwargs)

    init_process_group._seal_cpu = True
    dist.init_process_group = init_process_group


def _unpinned_cpu_offload() -> None:
    """verl's FSDP2 engine gives forward-only models ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an
    accelerator. Swap in an unpinned policy (CPU platform only)."""
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy
        import verl.workers.engine.fsdp.transformer_impl as impl
    except Exception:
        return
    if getattr(impl.CPUOffloadPolicy, "_seal_cpu", False):
        return

    class UnpinnedCPUOffloadPolicy(CPUOffloadPolicy):
        _seal_cpu = True

        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def _register_platform() -> None:
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    if PlatformRegistry.get("cpu") is not None and getattr(PlatformRegistry.get("cpu"), "_seal", False):
        return

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        """verl platform for CPU-only runs (selected only by ``VERL_PLATFORM=cpu``)."""

        _seal = True

        def __init__(self):
            super().__init__()
            _dedup_backend_strings()
            _unpinned_cpu_offload()
            from seal_trainer import shared_prefix

            shared_prefix.register()

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = CPU_DEVICE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check=False) -> bool:
            return False  # never auto-detected: only VERL_PLATFORM=cpu selects it

        def current_device(self):
            # verl passes this straight to .to(...) / torch.device(...): on CPU that must be "cpu", not 0.
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index=None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"  # the fake GPU count given to ray.init

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None


# ----------------------------------------------------------------------------------------- hf rollout

SERVER_NAME = "seal_hf_rollout_{rank}"


class HFRolloutServerImpl:
    """Token-in/token-out generation for the agent loops: concurrent requests are decoded together.

    Wrapped by ``ray.remote`` as ``HFRolloutServer``; the load balancer hands its handle to the agent loops. Every
    request goes through one ``GenerationQueue`` over one ``BatchGenerator`` (``seal_envs.evaluation
    .batch_generate``): the episodes' concurrent requests share a batch, a group's shared prompt is prefilled once,
    keys/values are reused across a conversation's turns (``prefix_caching``, bounded by ``cache_bytes``). A
    request's ``sampling_params["seed"]`` (the agent loop derives it from the run's seed) seeds its own row, so
    rollouts are reproducible whatever shares their batch. ``dtype`` ``auto``: bf16 where the CPU has bf16 units.
    """

    def __init__(self, model_path: str, response_length: int, dtype: str = "auto", seed: int = 0,
                 num_threads: int | None = None, prefix_caching: bool = True, cache_bytes: int = DEFAULT_MAX_BYTES):
        torch.set_num_threads(num_threads or os.cpu_count() or 1)
        self.generator = model_generator(model_path, cache_bytes if prefix_caching else 0, dtype)
        self.model = self.generator.model
        self.queue = GenerationQueue(self.generator)
        self.response_length = response_length
        self.global_steps = 0
        self.seed = int(seed)
        self.eos_ids = self.generator.eos_ids
        self.calls = 0

    def _submit(self, prompt_ids: list[int], sampling_params: dict[str, Any]):
        max_new = int(sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens")
                      or self.response_length)
        max_new = max(1, min(max_new, self.response_length))
        top_k = int(sampling_params.get("top_k", -1) or -1)
        sampling = Sampling(temperature=float(sampling_params.get("temperature", 1.0) or 0.0),
                            top_p=float(sampling_params.get("top_p", 1.0) or 1.0), top_k=max(top_k, 0),
                            seed=self.seed)
        seed = sampling_params.get("seed")
        return self.queue.submit(list(prompt_ids), max_new, sampling, int(seed) if seed is not None else None)

    def _output(self, generation, sampling_params: dict[str, Any]):
        from verl.workers.rollout.replica import TokenOutput

        self.calls += 1
        return TokenOutput(token_ids=generation.tokens,
                           log_probs=generation.logprobs if sampling_params.get("logprobs") else None,
                           stop_reason="completed" if generation.finished else "length", num_preempted=0,
                           extra_fields={"global_steps": self.global_steps})

    def _generate(self, prompt_ids: list[int], sampling_params: dict[str, Any]):
        """One request, waiting for its batch (for callers in threads)."""
        return self._output(self._submit(prompt_ids, sampling_params).result(), sampling_params)

    async def generate(self, request_id: str = "", *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data=None, video_data=None, **kwargs):
        sampling_params = dict(sampling_params)
        generation = await asyncio.wrap_future(self._submit(list(prompt_ids), sampling_params))
        return self._output(generation, sampling_params)

    def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Load the trainer's weights between batches; a sync whose names match none of the model's raises (with
        ``strict=False`` it would silently keep the old policy)."""
        with self.queue.lock:
            own = self.model.state_dict()
            loaded = [name for name in state_dict if name in own]
            if not loaded:
                raise ValueError(f"weight sync loaded no tensor: none of the {len(state_dict)} names sent (e.g. "
                                 f"{sorted(state_dict)[:3]}) is a parameter of the rollout model (e.g. "
                                 f"{sorted(own)[:3]}); the rollout policy would never change")
            ignored = sorted(set(state_dict) - set(own))
            if ignored:
                logger.warning("weight sync: %d tensors the rollout model does not have were ignored (e.g. %s)",
                               len(ignored), ignored[:3])
            self.model.load_state_dict({name: state_dict[name] for name in loaded}, strict=False)
            if getattr(self.model.config, "tie_word_embeddings", False):
                self.model.tie_weights()
            self.generator.clear()
        if global_steps is not None:
            self.global_steps = global_steps
        print(f"rollout server (totals at policy version {self.global_steps}): {self.stats()}", flush=True)  # train.log
        return len(loaded)

    async def sleep(self):
        """verl sleeps the rollout replicas between generation and the actor update (``on_sample_end``). The stored
        keys/values and the pages the allocator kept from the batches' freed tensors go back to the OS here, so the
        update has that memory; the weights stay (the next sync overwrites them), and the cache would be stale
        after that sync anyway."""
        with self.queue.lock:
            self.generator.clear()
        _return_freed_memory()

    # Control methods the replica/checkpoint manager call; nothing to do for an in-memory HF model.
    async def wake_up(self): return None
    async def abort_all_requests(self, reject_request: bool = False): return None
    async def resume_generation(self): return None
    async def clear_kv_cache(self): return None
    async def release_kv_cache(self): return None
    async def resume_kv_cache(self): return None
    async def start_profile(self, **kwargs): return None
    async def stop_profile(self): return None

    def stats(self) -> dict[str, int]:
        gen = self.generator
        return {"calls": self.calls, "global_steps": self.global_steps, "prefill_tokens": gen.prefill_tokens,
                "reused_tokens": gen.reused_tokens, "generated_tokens": gen.generated_tokens,
                "batches": self.queue.batches, "cache_bytes": gen.cache.nbytes, "decode_steps": gen.decode_steps,
                "joins": gen.joins, **{f"{k}_s": round(v, 1) for k, v in gen.seconds.items()}}


def _return_freed_memory() -> None:
    """Hand the pages of freed tensors back to the OS: glibc keeps freed blocks below its mmap threshold (a row's
    keys/values of one layer are ~1.5 MB) in its arenas, where the process still holds them."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator returns memory its own way
        pass


def _register_rollout() -> None:
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    rollout_base._ROLLOUT_REGISTRY[("hf", "async")] = "seal_trainer.cpu.HFServerAdapter"
    RolloutReplicaRegistry.register("hf", lambda: __getattr__("HFReplica"))


def _replica_classes():
    """Define the verl subclasses lazily (their bases import a lot of verl)."""
    import ray
    from verl.workers.rollout.base import BaseRollout
    from verl.workers.rollout.replica import RolloutReplica

    class _HFServerAdapter(BaseRollout):
        """Lives in the hybrid actor worker; pushes the trainer's weights to this replica's server."""

        def __init__(self, config, model_config, device_mesh, *args, **kwargs):
            super().__init__(config, model_config, device_mesh, *args, **kwargs)
            rank = int(os.environ.get("RANK", "0"))
            world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                     * self.config.pipeline_model_parallel_size)
            self.replica_rank, self.is_leader = rank // world, rank % world == 0

        async def resume(self, tags: list[str]):
            return None

        async def release(self):
            return None

        async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs):
            state = {name: t.detach().to("cpu", copy=True).contiguous()
                     for name, t in ((n, _full(t)) for n, t in weights)}
            if not self.is_leader:
                return
            server = ray.get_actor(SERVER_NAME.format(rank=self.replica_rank))
            await server.update_weights.remote(state, kwargs.get("global_steps"))

    class _HFReplica(RolloutReplica):
        async def launch_servers(self):
            name = SERVER_NAME.format(rank=self.replica_rank)
            server_cls = ray.remote(HFRolloutServerImpl)
            self._server_handle = server_cls.options(name=name, num_cpus=0, max_concurrency=self.max_concurrency,
                                                     lifetime=None).remote(
                _model_path(self.model_config), self.config.response_length, str(self.config.dtype), self.config.seed,
                prefix_caching=bool(self.config.enable_prefix_caching))
            await self._server_handle.stats.remote()
            self._server_address = f"hf-rollout-{self.replica_rank}"
            self.servers = [self._server_handle]

        def rollout_worker_use_gpu(self) -> bool:
            return False

    return _HFServerAdapter, _HFReplica


def _model_path(model_config) -> str:
    local = getattr(model_config, "local_path", None) if not hasattr(model_config, "get") else model_config.get("local_path")
    return str(local or model_config.get("path") if hasattr(model_config, "get") else model_config.path)


def _full(t: torch.Tensor) -> torch.Tensor:
    """Materialise a DTensor shard into a full tensor."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


_CLASSES = None


def __getattr__(name: str):
    global _CLASSES
    if name in ("HFServerAdapter", "HFReplica"):
        if _CLASSES is None:
            _CLASSES = _replica_classes()
        return _CLASSES[0] if name == "HFServerAdapter" else _CLASSES[1]
    raise AttributeError(name)


def register() -> None:
    """Register the CPU platform and the ``hf`` rollout with verl (idempotent, harmless on GPUs)."""
    _register_platform()
    _register_rollout()


__all__ = ["CPU_ENV", "activate", "cpu_overrides", "gpu_available", "register"]
