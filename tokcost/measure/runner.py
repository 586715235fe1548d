"""Prefill plus greedy decode over static buffers: eager, CUDA-graph and compiled decode steps.

Greedy argmax stays on the device and the position advances as a device tensor, so the token loop
never waits on the host. Three ways to run a decode step:
- eager: the step attends over exactly the filled slots (the host knows the position, no mask);
- graph (CUDA): one step per KV bucket of BUCKET_TOKENS slots is captured as a CUDA graph and replayed,
  the position-dependent mask built on the device, so the replay needs no host input;
- compile: the same bucketed step through torch.compile (fused kernels, Ansel et al. 2024), captured
  per bucket as a CUDA graph on a GPU, called directly on the CPU.
A bucketed step reads at most BUCKET_TOKENS - 1 slots more than the filled part; `contexts()` says how
many slots each step reads, so bytes and predictions follow what the loop did.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from tokcost.errors import MeasureError
from tokcost.measure import clock
from tokcost.measure.model import Decoder

BUCKET_TOKENS = 64  # KV slots per captured bucket: a step reads at most 63 slots past the filled part
MODES = ("eager", "graph", "compile")


class DecodeRunner:
    """Runs prefill and the output_tokens - 1 decode steps of one prompt batch, again and again."""

    def __init__(self, model: Decoder, prompt: Tensor, output_tokens: int, mode: str) -> None:
        batch, self.prompt_len = prompt.shape
        if batch > model.max_batch or self.prompt_len + output_tokens > model.max_seq:
            raise MeasureError(
                f"batch {batch} x {self.prompt_len} + {output_tokens} tokens exceeds the cache "
                f"({model.max_batch} x {model.max_seq})"
            )
        if mode not in MODES:
            raise MeasureError(f"mode {mode!r} is unknown; use one of {', '.join(MODES)}")
        self.model, self.mode, self.steps = model, mode, output_tokens - 1
        self.bucketed = mode != "eager"
        device = prompt.device
        self.prompt = prompt
        self.prompt_pos = torch.arange(self.prompt_len, device=device)  # [P]
        self.seq = torch.zeros(batch, model.max_seq, dtype=torch.long, device=device)  # [B, T] all tokens
        self.seq[:, : self.prompt_len] = prompt
        self.tok = torch.zeros(batch, 1, dtype=torch.long, device=device)  # [B, 1] last token
        self.pos = torch.zeros(1, dtype=torch.long, device=device)  # [1] its position
        self.host_pos = 0  # the same position, known on the host without a sync
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.next_fn: Callable[..., Tensor] = model.next_token
        if mode == "compile":
            model.shard.functional = True  # collectives torch.compile can trace
            model.compile_blocks()

    # ---- what each step reads ----------------------------------------------------------------

    def bucket_of(self, length: int) -> int:
        """Slots a bucketed step attends when `length` positions are filled (the new token's included)."""
        return min(self.model.max_seq, -(-length // BUCKET_TOKENS) * BUCKET_TOKENS)

    def contexts(self) -> list[int]:
        """Slots per sequence each decode step reads in a full-attention layer (before window caps)."""
        lengths = range(self.prompt_len + 1, self.prompt_len + self.steps + 1)
        return [self.bucket_of(n) if self.bucketed else n for n in lengths]

    def kv_read_bytes(self) -> list[float]:
        """KV bytes each decode step reads on this rank, all layers, all sequences."""
        per_slot = self.model.kv_bytes_per_slot()
        batch = self.tok.shape[0]
        out = []
        for n in range(self.prompt_len + 1, self.prompt_len + self.steps + 1):
            bucket = self.bucket_of(n) if self.bucketed else None
            slots = [a.slots_read(n - 1, bucket) for a in self.model.attentions()]
            out.append(batch * sum(s * b for s, b in zip(slots, per_slot, strict=True)))
        return out

    # ---- running -------------------------------------------------------------------------------

    def prefill(self) -> None:
        """Run the prompt (overwriting the cache from position 0) and emit the first token."""
        first = self.model.next_token(self.prompt, self.prompt_pos, start=0)  # [B, 1]
        self.seq[:, self.prompt_len : self.prompt_len + 1] = first
        self.tok.copy_(first)
        self.pos.fill_(self.prompt_len)
        self.host_pos = self.prompt_len

    def _body(self, bucket: int | None, start: int | None) -> None:
        """One greedy step, in place: tok and pos advance and the new token lands in seq."""
        nxt = self.next_fn(self.tok, self.pos, start=start, bucket=bucket)  # [B, 1]
        self.pos.add_(1)
        self.seq.index_copy_(1, self.pos, nxt)
        self.tok.copy_(nxt)

    def step(self) -> None:
        """One decode step: a graph replay, a bucketed call, or an exact eager call."""
        length = self.host_pos + 1
        if self.graphs:
            self.graphs[self.bucket_of(length)].replay()
        elif self.bucketed:
            self._body(self.bucket_of(length), None)
        else:
            self._body(None, self.host_pos)
        self.host_pos += 1

    def decode(self) -> None:
        """The remaining output_tokens - 1 steps."""
        for _ in range(self.steps):
            self.step()

    def timed_decode(self, device: torch.device) -> list[float]:
        """The decode steps, each timed: CUDA events between steps (one sync at the end), or wall clock."""
        if device.type == "cuda":
            events = [torch.cuda.Event(enable_timing=True) for _ in range(self.steps + 1)]
            events[0].record()
            for i in range(self.steps):
                self.step()
                events[i + 1].record()
            events[-1].synchronize()
            return [
                a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:], strict=False)
            ]  # milliseconds to seconds
        out = []
        for _ in range(self.steps):
            t0 = clock.now()
            self.step()
            out.append(clock.now() - t0)
        return out

    def capture(self, warm_steps: int = 3) -> None:
        """Record one decode step per bucket the run uses as a CUDA graph (graphs share one memory pool)."""
        pool = torch.cuda.graph_pool_handle()
        for bucket in sorted(set(self.contexts())):
            self.prefill()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up (and compilation) off the capture stream
                for _ in range(min(warm_steps, self.steps)):
                    self._body(bucket, None)
            torch.cuda.current_stream().wait_stream(side)
            self.prefill()  # positions back to the prompt end before recording
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._body(bucket, None)
            self.graphs[bucket] = graph

    def generated(self) -> Tensor:
        """The output tokens of the last run: [B, output_tokens]."""
        return self.seq[:, self.prompt_len : self.prompt_len + self.steps + 1]


def random_prompt(vocab_size: int, batch: int, prompt_tokens: int, device: torch.device, seed: int) -> Tensor:
    """Uniform random token ids [B, P] from a seeded generator."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, prompt_tokens), generator=gen, device=device)


@torch.inference_mode()
def generate(model: Decoder, prompt: Tensor, output_tokens: int, mode: str = "eager") -> Tensor:
    """Greedy-decode output_tokens tokens after prompt [B, P]: [B, output_tokens]."""
    if mode == "graph" and prompt.device.type != "cuda":
        raise MeasureError("CUDA graphs need a GPU")
    gen = DecodeRunner(model, prompt, output_tokens, mode)
    if mode == "graph" or (mode == "compile" and prompt.device.type == "cuda"):
        gen.capture()
    gen.prefill()
    gen.decode()
    return gen.generated().clone()
