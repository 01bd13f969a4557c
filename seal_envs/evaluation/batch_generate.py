"""One batched, prefix-cached generator for every place SEAL decodes with a Hugging Face model.

Training rollouts (the trainer's CPU rollout server, ``seal_trainer.cpu``), ``seal-eval --policy hf``, the warm
start's evaluation (``benchmarks/replication/evaluate.py``) and the benchmarks all decode here. On CPU one sequence
at a time leaves most of the arithmetic units idle while decoding (each step reads all the weights for one
token: about 39 ms per token alone, 12.5 ms per token per sequence at batch 8 on SmolLM2-135M), and re-prefilling
the ~1.6k-token tool prompt at every assistant message dominated the time. ``BatchGenerator`` therefore:

1. prefills, once per distinct prompt, only the tokens no earlier request computed (``PrefixCache``, bounded by
   bytes: the G samples of a task share their first prompt, and every later prompt extends the conversation's
   own previous sequence), without computing logits over the vocabulary for the prefilled positions;
2. stitches those per-prompt caches into one batched cache: the prefix all running rows share (the tool-laden
   system prompt; the whole prompt for a GRPO group's samples) is held once and each decode step attends to it
   for all rows in one matrix product (``prefix_and_rows_attention``: at 16 rows of ~2k tokens, attention that
   read a copy per row was half of a decode step), and each row's own tokens follow, left-padded, with room for
   the tokens to come (appending a token writes in place, where ``DynamicCache`` would copy the whole cache at
   every step); it decodes all rows together as a continuous batch: a row that ends is answered at once, and
   requests that arrive meanwhile join the running batch (multi-turn episodes no longer wait, turn after turn,
   for the longest message of their batch); ended rows are dropped when joiners arrive or half of the batch has
   ended (each such change copies the running rows' own tokens once);
3. samples each row with its own ``torch.Generator`` seeded per request, so what a request generates does not
   depend on which other requests shared its batch (same seed, same tokens: reproducible rollouts);
4. stores each row's keys/values for the next request of its conversation, the batch's shared prefix by
   reference (one tensor for all rows of a batch, not one copy per row).

``GenerationQueue`` is the front end for concurrent callers (the rollout server's coroutines, ``seal-eval``'s
worker threads).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from seal_envs.formats import DEFAULT_TOOL_FORMAT
from seal_envs.prefix_cache import DEFAULT_MAX_BYTES, Pieces, PrefixCache, cache_of, common_prefix, compact, span

GROUPED_SDPA = "seal_grouped_sdpa"
SHARED_PREFIX = "seal_shared_prefix"  # the model-call keyword that carries a batch's shared prefix, per layer


def _grouped_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                  is_causal: bool | None = None, **kwargs):
    """transformers' sdpa attention, with grouped-query heads shared (``enable_gqa``) even under a mask; a decode
    step given ``seal_shared_prefix`` attends to that prefix and to the rows' own keys/values (``key``, ``value``)."""
    import torch

    prefix = kwargs.get(SHARED_PREFIX)
    if prefix is not None and query.shape[2] == 1:
        return prefix_and_rows_attention(query, *prefix[module.layer_idx], key, value, attention_mask, scaling)
    causal = query.shape[2] > 1 and attention_mask is None and (
        is_causal if is_causal is not None else getattr(module, "is_causal", True))
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, is_causal=causal,
                                                           enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


def prefix_and_rows_attention(query, prefix_keys, prefix_values, keys, values, mask, scaling: float | None = None):
    """One decode step's attention over a prefix every row shares (``prefix_*``: 1 x kv heads x P x dim) followed by
    each row's own tokens (``keys``, ``values``: rows x kv heads x S x dim, ``mask`` over them as sdpa takes it).

    The softmax over P + S keys is computed in two parts merged by their log-sum-exp, which is exact up to
    rounding. The gain is in the first part: every row's query heads meet the prefix in one matrix product, so its
    keys and values are read once per step instead of once per row (the G samples of a GRPO group share their
    ~2k-token prompt). Returns ``(rows x 1 x query heads x dim, None)``, as transformers' attention functions do.
    """
    import torch

    rows, heads, _, dim = query.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim ** -0.5
    q = query.reshape(rows, kv_heads, group, dim)  # query head h reads key/value head h // group

    # the prefix: all rows' query heads of one kv head as the rows of one matrix, kv heads x (rows * group) x P
    scores = torch.matmul(q.transpose(0, 1).reshape(kv_heads, rows * group, dim), prefix_keys[0].transpose(1, 2))
    scores = scores.float().mul_(scale)
    top = scores.amax(-1, keepdim=True)
    weights = scores.sub_(top).exp_()
    total = weights.sum(-1, keepdim=True)
    from_prefix = torch.matmul(weights.to(query.dtype), prefix_values[0]).float().div_(total)
    prefix_lse = top.add_(total.log_())

    own = torch.matmul(q, keys.transpose(2, 3)).float().mul_(scale)  # rows x kv heads x group x S
    if mask is not None:
        mask = mask.reshape(rows, 1, 1, -1)
        own = own.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else own.add_(mask)
    own_lse = own.logsumexp(-1, keepdim=True)
    from_own = torch.matmul(own.softmax(-1).to(query.dtype), values).float()

    def by_row(t):  # kv heads x (rows * group) x n -> rows x kv heads x group x n
        return t.reshape(kv_heads, rows, group, -1).transpose(0, 1)

    prefix_lse = by_row(prefix_lse)
    lse = torch.logaddexp(prefix_lse, own_lse)
    out = (prefix_lse - lse).exp() * by_row(from_prefix) + (own_lse - lse).exp() * from_own
    return out.to(query.dtype).reshape(rows, 1, heads, dim), None


def register_grouped_sdpa() -> str:
    """Register the attention and return its name (for ``attn_implementation=``)."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, _grouped_sdpa)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
    return GROUPED_SDPA


@functools.cache
def _reserved_layer_class():
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys/values are views of a buffer with room for the tokens to come."""

        def update(self, key_states, value_states, *args, **kwargs):
            import torch

            end = self.length + key_states.shape[-2]
            if end > self.buffer[0].shape[-2]:  # out of room: one copy into a buffer with room for more
                grown = tuple(b.new_empty((*b.shape[:2], end + BatchGenerator.GROW, b.shape[-1])) for b in self.buffer)
                for old, new in zip(self.buffer, grown):
                    new[:, :, :self.length] = old[:, :, :self.length]
                self.buffer = grown
            self.buffer[0][:, :, self.length:end] = key_states
            self.buffer[1][:, :, self.length:end] = value_states
            self.length = end
            self._views()
            return self.keys, self.values

        def _views(self) -> None:
            self.keys, self.values = self.buffer[0][:, :, :self.length], self.buffer[1][:, :, :self.length]

        def select_rows(self, rows) -> None:
            """Keep only ``rows`` of the batch (one copy of the kept rows)."""
            self.buffer = tuple(b.index_select(0, rows) for b in self.buffer)
            self._views()

    return ReservedLayer


def _reserved_layer(keys: Sequence[Any], values: Sequence[Any], reserve: int):
    """One layer of batch-1 caches of different lengths, left-padded with zeros to the longest, with room for
    ``reserve`` more tokens, so that appending a token writes in place instead of copying the cache."""
    lengths = [k.shape[-2] for k in keys]
    width = max(lengths)
    layer = _reserved_layer_class()()
    layer.dtype, layer.device, layer.is_initialized, layer.length = keys[0].dtype, keys[0].device, True, width
    layer.buffer = tuple(parts[0].new_empty((len(parts), parts[0].shape[1], width + reserve, parts[0].shape[-1]))
                         for parts in (keys, values))
    for buffer, parts in zip(layer.buffer, (keys, values)):
        for row, (part, n) in enumerate(zip(parts, lengths)):
            buffer[row, :, : width - n] = 0
            buffer[row, :, width - n: width] = part[0]
    layer._views()
    return layer


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """How tokens are picked. ``temperature`` 0 is greedy; ``top_k`` 0 keeps all tokens; ``seed`` makes sampled
    runs reproducible (a request's own seed, where given, wins)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def batch_key(self) -> tuple[float, float, int]:
        """Requests with equal keys can share a batch (the seed is per row)."""
        return (self.temperature, self.top_p, self.top_k) if not self.greedy else (0.0, 1.0, 0)


@dataclass(frozen=True)
class Generation:
    """One prompt's continuation: its new tokens (ending with the eos token when ``finished``), their log-probs
    under the sampling distribution, and whether it ended by itself (False: it hit its token cap)."""

    tokens: list[int]
    finished: bool
    logprobs: list[float]


def row_seed(*parts: int) -> int:
    """A 63-bit seed from integers (run seed, step, sample, turn...), stable across processes."""
    import hashlib

    digest = hashlib.blake2b(",".join(str(int(p)) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _pick(logits, sampling: Sampling, generators: Sequence[Any]):
    """Next token and its log-prob per row (logits: rows x vocab, float32)."""
    import torch

    if sampling.greedy:
        tokens = logits.argmax(dim=-1)
        return tokens, torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None])[:, 0]
    scores = logits / sampling.temperature
    if 0 < sampling.top_k < scores.shape[-1]:
        kth = scores.topk(sampling.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sampling.top_p < 1.0:
        ordered, order = scores.sort(dim=-1, descending=True)
        mass = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = mass - ordered.softmax(dim=-1) >= sampling.top_p  # the tokens after the first top_p of the mass
        scores = scores.scatter(1, order, ordered.masked_fill(drop, float("-inf")))
    logp = torch.log_softmax(scores, dim=-1)
    probs = logp.exp()
    tokens = torch.stack([torch.multinomial(probs[i], 1, generator=g)[0] for i, g in enumerate(generators)])
    return tokens, logp.gather(1, tokens[:, None])[:, 0]


@dataclass(eq=False)
class _Row:
    """One request of the running batch: its prompt, what it generated so far, and whom to tell when it ends."""

    prompt: list[int]
    limit: int
    sampling: Sampling
    generator: Any  # torch.Generator
    done: Callable[[Generation | BaseException], None]
    new: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    over: bool = False

    @property
    def sequence(self) -> list[int]:
        return self.prompt + self.new


class BatchGenerator:
    """Continue many token prompts together, reusing keys/values of earlier requests (see module docstring).

    A continuous batch: ``admit`` queues a request, ``step`` decodes one token for every running row, first
    letting the queued requests join; a row that ends leaves at once (its caller is told), so a short answer never
    waits for the longest one in its batch. ``generate`` is the one-call form. ``cache_bytes`` bounds the stored
    keys/values (least recently used go first); size it to hold the conversations played at once, or each request
    re-prefills its conversation. Not thread-safe: concurrent callers go through ``GenerationQueue``.
    """

    GROW = 256  # tokens of room added when a row outgrows the batch's key/value buffer

    def __init__(self, model, eos_ids: Sequence[int], pad_id: int, cache_bytes: int = DEFAULT_MAX_BYTES):
        self.model = model
        self.eos_ids = [int(i) for i in eos_ids]
        self.pad_id = int(pad_id)
        self.cache = PrefixCache(max_bytes=cache_bytes)
        self.prefill_tokens = self.reused_tokens = self.generated_tokens = self.joins = self.decode_steps = 0
        self.seconds = {"prefill": 0.0, "decode": 0.0, "join": 0.0}  # where the generator's time went
        self._reset()

    def _reset(self) -> None:
        self._rows: list[_Row] = []
        self._joining: list[tuple[_Row, Pieces]] = []
        self._batch = self._mask = self._positions = self._tokens = None
        self._prefix: list[tuple[Any, Any]] | None = None  # per layer, the keys/values every row shares

    @property
    def shared_tokens(self) -> int:
        """Leading tokens all running rows have in common: the batch holds their keys/values once, and each decode
        step reads them once for all rows."""
        return self._prefix[0][0].shape[-2] if self._prefix else 0

    @property
    def running(self) -> int:
        """Requests admitted and not yet ended."""
        return len(self._joining) + sum(not r.over for r in self._rows)

    def _prefilled(self, prompt: list[int]) -> Pieces:
        """The pieces holding the keys/values of ``prompt[:-1]`` (the last token is fed by the decode): those the
        prefix cache holds, referenced, and one new piece for the tokens prefilled now."""
        import torch

        reused, pieces = self.cache.lookup(prompt)
        self.reused_tokens += reused
        if reused < len(prompt) - 1:
            rest = torch.tensor([prompt[reused:-1]], dtype=torch.long, device=self.model.device)
            self.prefill_tokens += rest.shape[1]
            past = cache_of([(span(keys, 0, reused), span(values, 0, reused)) for keys, values in pieces]
                            ) if pieces else None
            t0 = time.perf_counter()
            with torch.no_grad():
                layers = self.model(input_ids=rest, past_key_values=past, use_cache=True,
                                    logits_to_keep=1).past_key_values.layers
            self.seconds["prefill"] += time.perf_counter() - t0
            pieces = [(keys + [compact(layer.keys[:, :, reused:])], values + [compact(layer.values[:, :, reused:])])
                      for (keys, values), layer in zip(pieces or [([], [])] * len(layers), layers)]
            self.cache.store(prompt[:-1], pieces)
        return pieces

    def admit(self, prompt: Sequence[int], max_new_tokens: int, sampling: Sampling, seed: int,
              done: Callable[[Generation | BaseException], None]) -> None:
        """Queue one request (at least 2 tokens): what the prefix cache lacks of its prompt is prefilled now, and it
        joins the batch at the next ``step``. ``done`` gets its ``Generation``, or the exception that ended it."""
        import torch

        prompt = list(prompt)
        if len(prompt) < 2:
            raise ValueError("each prompt needs at least 2 tokens")
        row = _Row(prompt, max(1, int(max_new_tokens)), sampling,
                   torch.Generator(self.model.device).manual_seed(int(seed)), done)
        self._joining.append((row, self._prefilled(prompt)))

    def step(self) -> None:
        """Decode one token for every running row (the queued requests join first); rows that end call ``done``."""
        t0 = time.perf_counter()
        if self._joining or 2 * sum(r.over for r in self._rows) >= max(len(self._rows), 1):
            self._rebuild()
        t1 = time.perf_counter()
        self.seconds["join"] += t1 - t0
        if self._rows:
            self.decode_steps += 1
            try:
                self._decode()
            finally:
                self.seconds["decode"] += time.perf_counter() - t1

    def _decode(self) -> None:
        import torch

        with torch.no_grad():
            shared = {SHARED_PREFIX: self._prefix} if self._prefix else {}
            logits = self.model(input_ids=self._tokens, attention_mask=self._mask, position_ids=self._positions,
                                past_key_values=self._batch, use_cache=True, **shared).logits[:, -1, :].float()
        picked = [self.pad_id] * len(self._rows)
        groups: dict[tuple, list[int]] = {}
        for b, row in enumerate(self._rows):
            if not row.over:
                groups.setdefault(row.sampling.batch_key(), []).append(b)
        for members in groups.values():
            index = torch.tensor(members, dtype=torch.long, device=logits.device)
            tokens, lps = _pick(logits.index_select(0, index), self._rows[members[0]].sampling,
                                [self._rows[b].generator for b in members])
            for b, token, lp in zip(members, tokens.tolist(), lps.tolist()):
                row, picked[b] = self._rows[b], token
                row.new.append(token)
                row.logprobs.append(lp if lp == lp and lp != float("-inf") else -1e4)
                self.generated_tokens += 1
                if token in self.eos_ids or len(row.new) >= row.limit:
                    row.over = True
                    self._store_row(b, row)
                    row.done(Generation(row.new, token in self.eos_ids, row.logprobs))
        if all(r.over for r in self._rows) and not self._joining:
            self._reset()
            return
        self._tokens = torch.tensor(picked, dtype=torch.long, device=self._mask.device)[:, None]
        self._mask = torch.cat([self._mask, self._mask.new_ones((self._mask.shape[0], 1))], dim=1)
        self._positions = self._positions + 1

    def _rebuild(self) -> None:
        """One copy of the running rows' keys/values (ended rows left out, joining rows added): the prefix all of
        them share once, and each row's own tokens after it, left-padded to the longest, with room for the tokens
        to come."""
        import torch
        from transformers import DynamicCache

        sources = [(row, self._pieces(b, row)) for b, row in enumerate(self._rows) if not row.over]
        sources += self._joining
        self.joins += bool(self._joining)
        self._reset()
        if not sources:
            return
        rows = [row for row, _ in sources]
        first = rows[0].sequence[:-1]
        shared = min((common_prefix(first, row.sequence[:-1]) for row in rows[1:]), default=0)
        reserve = min(self.GROW, max(row.limit - len(row.new) for row in rows))
        ends = [len(row.sequence) - 1 for row in rows]
        batch = DynamicCache()
        batch.layers = [_reserved_layer([span(keys, shared, n) for (keys, _), n in zip(pieces, ends)],
                                        [span(values, shared, n) for (_, values), n in zip(pieces, ends)], reserve)
                        for pieces in zip(*(layers for _, layers in sources))]
        if shared:  # the first row's: every row holds the same keys/values for these tokens (up to rounding)
            self._prefix = [tuple(compact(span(part, 0, shared)) for part in layer) for layer in sources[0][1]]
        width = batch.layers[0].length
        device = self.model.device
        self._rows, self._batch = rows, batch
        self._mask = torch.tensor([[0] * (width + 1 + shared - len(r.sequence)) + [1] * (len(r.sequence) - shared)
                                   for r in rows], dtype=torch.long, device=device)
        self._positions = torch.tensor([[len(r.sequence) - 1] for r in rows], dtype=torch.long, device=device)
        self._tokens = torch.tensor([[r.sequence[-1]] for r in rows], dtype=torch.long, device=device)

    def _pieces(self, b: int, row: _Row) -> list[tuple[list, list]]:
        """Per layer, the pieces that hold row ``b``'s keys and values in order: the shared prefix, its own tokens."""
        own = len(row.sequence) - 1 - self.shared_tokens
        pieces = []
        for layer, prefix in zip(self._batch.layers, self._prefix or [None] * len(self._batch.layers)):
            keys, values = (t[b:b + 1, :, layer.length - own:layer.length] for t in (layer.keys, layer.values))
            pieces.append(([prefix[0], keys], [prefix[1], values]) if prefix else ([keys], [values]))
        return pieces

    def abort(self, error: BaseException) -> None:
        """End every admitted request with ``error`` (the model failed mid-batch) and empty the batch."""
        rows = [row for row in self._rows if not row.over] + [row for row, _ in self._joining]
        self._reset()
        for row in rows:
            row.done(error)

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: Sequence[int], sampling: Sampling,
                 step: int = 0, seeds: Sequence[int | None] | None = None) -> list[Generation]:
        """Continue every prompt (at least 2 tokens each) by at most its ``max_new_tokens``, together.

        Row ``i`` samples with ``seeds[i]`` where given, else with a seed from ``sampling.seed``, ``step`` and ``i``.
        """
        prompts = [list(p) for p in prompts]
        if any(len(p) < 2 for p in prompts):
            raise ValueError("each prompt needs at least 2 tokens")
        if self.running:
            raise RuntimeError("generate() while admitted requests are running: use one front end per generator")
        seeds = list(seeds) if seeds is not None else [None] * len(prompts)
        results: list[Generation | BaseException | None] = [None] * len(prompts)
        try:
            for i, (prompt, limit, seed) in enumerate(zip(prompts, max_new_tokens, seeds)):
                self.admit(prompt, limit, sampling, seed if seed is not None else row_seed(sampling.seed, step, i),
                           functools.partial(results.__setitem__, i))
            while self.running:
                self.step()
        except BaseException as exc:
            self.abort(exc)
            raise
        return results  # type: ignore[return-value]

    def _store_row(self, b: int, row: _Row) -> None:
        """Keep the keys/values of one row's real tokens for its conversation's next turn: the batch's shared
        prefix by reference (every row of the batch stores the same tensor), its own tokens copied out of the
        batch buffer (padding left out)."""
        self.cache.store(row.sequence, [(keys[:-1] + [compact(keys[-1])], values[:-1] + [compact(values[-1])])
                                        for keys, values in self._pieces(b, row)])

    def clear(self) -> None:
        """Forget stored keys/values (after a weight update they belong to the old weights)."""
        self.cache.clear()


@dataclass
class _Request:
    prompt: list[int]
    max_new_tokens: int
    sampling: Sampling
    seed: int
    future: Future
    arrived: float = field(default_factory=time.monotonic)

    def finish(self, result: Generation | BaseException) -> None:
        from concurrent.futures import InvalidStateError

        try:  # a caller that gave up (cancelled) must not end the batch
            if isinstance(result, BaseException):
                self.future.set_exception(result)
            else:
                self.future.set_result(result)
        except InvalidStateError:
            pass


class GenerationQueue:
    """Thread-safe front end of a ``BatchGenerator``: concurrent requests are decoded together.

    ``submit`` returns a ``concurrent.futures.Future`` (``asyncio.wrap_future`` it in a coroutine), resolved as
    soon as its row ends. One worker thread runs the continuous batch: when it is idle it gathers the requests
    that arrive together (``gather_s`` without a new one, at most ``max_wait_s`` after the first); while it
    decodes, waiting requests join once they are a quarter of the running rows or have waited ``join_s`` (each
    join copies the batch's keys/values once). ``lock`` is held while decoding a token: take it to change the
    model's weights between requests.
    """

    def __init__(self, generator: BatchGenerator, gather_s: float = 0.02, max_wait_s: float = 0.2,
                 join_s: float = 0.5):
        self.generator = generator
        self.gather_s, self.max_wait_s, self.join_s = gather_s, max_wait_s, join_s
        self.lock = threading.RLock()
        self._pending: list[_Request] = []
        self._arrived = threading.Condition()
        self._worker: threading.Thread | None = None
        self._submitted = 0
        self.batches = self.requests = 0

    def submit(self, prompt: Sequence[int], max_new_tokens: int, sampling: Sampling = Sampling(),
               seed: int | None = None) -> Future:
        """Queue one request; ``seed`` (default: from ``sampling.seed`` and the submission count) seeds its row."""
        future: Future = Future()
        with self._arrived:
            if seed is None:
                seed = row_seed(sampling.seed, self._submitted)
            self._submitted += 1
            self._pending.append(_Request(list(prompt), int(max_new_tokens), sampling, int(seed), future))
            self._arrived.notify()
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._serve, name="seal-generation", daemon=True)
                self._worker.start()
        return future

    def generate(self, prompt: Sequence[int], max_new_tokens: int, sampling: Sampling = Sampling(),
                 seed: int | None = None) -> Generation:
        """``submit`` and wait (for threads)."""
        return self.submit(prompt, max_new_tokens, sampling, seed).result()

    def _take(self, running: int) -> list[_Request]:
        with self._arrived:
            if running:
                if not self._pending or (4 * len(self._pending) < running
                                         and time.monotonic() - self._pending[0].arrived < self.join_s):
                    return []
            else:
                while not self._pending:
                    self._arrived.wait()
                first = time.monotonic()
                while True:
                    seen = len(self._pending)
                    remaining = first + self.max_wait_s - time.monotonic()
                    if remaining <= 0:
                        break
                    self._arrived.wait(timeout=min(self.gather_s, remaining))
                    if len(self._pending) == seen:
                        break
            taken, self._pending = self._pending, []
            return taken

    def _serve(self) -> None:
        generator = self.generator
        while True:
            taken = self._take(generator.running)
            with self.lock:
                for request in taken:
                    try:  # a bad request fails its caller, not the batch
                        generator.admit(request.prompt, request.max_new_tokens, request.sampling, request.seed,
                                        request.finish)
                    except Exception as exc:
                        request.future.set_exception(exc)
                        continue
                    self.requests += 1
                self.batches += bool(taken)
                try:
                    generator.step()
                except BaseException as exc:  # the callers see the error; the worker serves the next requests
                    generator.abort(exc)


def cpu_has_bf16_units() -> bool:
    """True where this CPU has bf16 matrix instructions (``amx_bf16`` or ``avx512_bf16`` in /proc/cpuinfo):
    there bf16 compute measured about 2x faster than fp32 on SmolLM2-135M; without them it is slower."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


DTYPE_ENV = "SEAL_COMPUTE_DTYPE"


def compute_dtype(requested: str = "auto", device: str = "cpu") -> str:
    """``float32`` or ``bfloat16`` for ``requested``. ``auto`` takes ``$SEAL_COMPUTE_DTYPE`` when set (to pin one
    dtype on every machine, e.g. for runs compared across machines), else bf16 on a CPU with bf16 units or a GPU
    that has bf16, else fp32."""
    if requested == "auto" and os.environ.get(DTYPE_ENV):
        requested = os.environ[DTYPE_ENV]
        if requested not in ("float32", "bfloat16"):
            raise ValueError(f"${DTYPE_ENV} must be float32 or bfloat16, not {requested!r}")
    if requested != "auto":
        if requested not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be auto, float32 or bfloat16, not {requested!r}")
        return requested
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if cpu_has_bf16_units() else "float32"


def load_generator(model_path: str, cache_bytes: int = DEFAULT_MAX_BYTES, tool_format: str = DEFAULT_TOOL_FORMAT,
                   dtype: str = "auto") -> tuple[Any, BatchGenerator]:
    """The tokenizer (rendering tools in ``tool_format``, see ``seal_envs.tool_template``) and a CPU generator for a
    model folder; the envs the episodes play must use the same ``tool_format``."""
    from transformers import AutoTokenizer

    from seal_envs.tool_template import ensure_tool_template

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    ensure_tool_template(tokenizer, str(model_path), tool_format)
    pad = tokenizer.pad_token_id
    return tokenizer, model_generator(model_path, cache_bytes, dtype, fallback_eos=tokenizer.eos_token_id, pad_id=pad)


def model_generator(model_path: str, cache_bytes: int = DEFAULT_MAX_BYTES, dtype: str = "auto", device: str = "cpu",
                    fallback_eos: int | None = None, pad_id: int | None = None) -> BatchGenerator:
    """A ``BatchGenerator`` on the model of a Hugging Face folder (grouped-query sdpa attention)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, compute_dtype(dtype, device)),
                                                 attn_implementation=register_grouped_sdpa()).to(device).eval()
    gen = model.generation_config
    eos = gen.eos_token_id if gen is not None else None
    eos_ids = [eos] if isinstance(eos, int) else list(eos or ([fallback_eos] if fallback_eos is not None else []))
    if pad_id is None:
        pad_id = (gen.pad_token_id if gen is not None else None)
    return BatchGenerator(model, eos_ids, pad_id if pad_id is not None else (eos_ids or [0])[0], cache_bytes)


__all__ = ["DTYPE_ENV", "BatchGenerator", "Generation", "GenerationQueue", "Sampling", "compute_dtype",
           "cpu_has_bf16_units", "load_generator", "model_generator", "prefix_and_rows_attention",
           "register_grouped_sdpa", "row_seed"]
