"""Tensor parallelism on torch.distributed: N ranks (spawned here, or launched by torchrun), one job each.

Rank 0 streams its results back as each batch finishes, so an interrupted or failed session keeps what
finished. NCCL on CUDA (one GPU per rank), gloo on the CPU (each rank gets cores / N threads), so TP 2
runs for real on two CPU processes. The all-reduce probe times sum-all-reduces at decode message sizes and
above, as nccl-tests does, and fits t = latency + 2 (N-1)/N x bytes / bus bandwidth (the ring the engine
prices): nccl-tests' "bus bandwidth" is that 2 (N-1)/N x bytes / time.
"""

from __future__ import annotations

import os
import queue as queue_mod
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokcost.errors import MeasureError, TokcostError
from tokcost.measure.calibrate import fit_allreduce

PROBE_SIZES = {"cuda": [2**k for k in range(10, 29, 2)], "cpu": [2**k for k in range(10, 23, 2)]}  # bytes


@dataclass(frozen=True)
class TpJob:
    """What every rank runs: the probe, then each batch (see session.measure_batch)."""

    spec: Any  # ModelSpec
    device: str
    dtype: str
    batches: list[int]
    prompt_tokens: int
    output_tokens: int
    repeats: int
    mode: str
    threads: int | None
    probe_only: bool = False


def torchrun_rank() -> tuple[int, int] | None:
    """(rank, world) when this process was started by torchrun (RANK / WORLD_SIZE set), else None."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe_allreduce(shard: Any, device: Any, dtype: Any, sizes: list[int], repeats: int = 10) -> dict:
    """Median time of one all-reduce per message size, and the latency + bus-bandwidth fit."""
    import torch
    import torch.distributed as dist

    rows = []
    for size in sizes:
        x = torch.ones(max(size // dtype.itemsize, 1), dtype=dtype, device=device)
        for _ in range(3):
            dist.all_reduce(x)
        times = []
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            dist.all_reduce(x)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
        # every rank takes the slowest rank's time: a collective ends when its last member ends
        t = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        rows.append({"bytes": x.numel() * x.element_size(), "seconds": float(t.item())})
    return fit_allreduce(rows, shard.world, "nccl" if device.type == "cuda" else "gloo")


def rank_main(rank: int, world: int, port: int, results: Any, job: TpJob) -> None:
    """One rank: join the group, run the job, send rank 0's results; quiet on Ctrl-C."""
    import torch.distributed as dist

    from tokcost.measure.faults import first_line, is_oom

    try:
        _join(rank, world, port, job.device)
        _run_rank(rank, world, job, results.put if rank == 0 else (lambda _m: None))
    except KeyboardInterrupt:
        os._exit(130)
    except BaseException as exc:  # every failure goes back as one line; the parent decides what to print
        kind = "oom" if is_oom(exc) else "error"
        message = str(exc) if isinstance(exc, TokcostError) else f"{type(exc).__name__}: {first_line(exc)}"
        results.put((kind, f"rank {rank}: {message}"))
        results.close()
        results.join_thread()  # the message must leave before the process does
        os._exit(1)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _join(rank: int, world: int, port: int | None, device: str) -> None:
    import torch
    import torch.distributed as dist

    if device == "cuda":
        if torch.cuda.device_count() < world:
            raise MeasureError(f"--tp {world} needs {world} GPUs; torch sees {torch.cuda.device_count()}")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    backend = "nccl" if device == "cuda" else "gloo"
    if port is None:  # torchrun: MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE in the environment
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)


def _run_rank(rank: int, world: int, job: TpJob, send: Callable[[tuple], None]) -> None:
    import torch

    from tokcost.measure.loop import TORCH_DTYPES
    from tokcost.measure.session import measure_batch
    from tokcost.measure.shard import Shard

    device = torch.device("cuda", torch.cuda.current_device()) if job.device == "cuda" else torch.device("cpu")
    threads = job.threads or max(1, (os.cpu_count() or 1) // world)
    if device.type == "cpu":
        torch.set_num_threads(threads)
    shard = Shard(rank=rank, world=world)
    sizes = sorted({*PROBE_SIZES[device.type], *(b * job.spec.hidden_size * TORCH_DTYPES[job.dtype].itemsize
                                                  for b in job.batches)})  # fmt: skip
    send(("link", probe_allreduce(shard, device, TORCH_DTYPES[job.dtype], sizes)))
    for batch in [] if job.probe_only else job.batches:
        loop, overhead = measure_batch(job.spec, job, batch, shard=shard, threads=threads)
        send(("run", (loop, overhead)))
    send(("done", None))


def run_ranks(job: TpJob, world: int, on_message: Callable[[str, Any], None]) -> None:
    """Spawn `world` ranks and hand rank 0's messages to on_message until it is done (or a rank fails)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, results, job), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    try:
        while True:
            try:
                kind, payload = results.get(timeout=0.2)
            except queue_mod.Empty:
                dead = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead:
                    if _drain(results, on_message):
                        return
                    raise MeasureError(f"--tp {world}: rank {dead[0][0]} exited with code {dead[0][1]}") from None
                continue
            on_message(kind, payload)
            if kind in ("done", "oom", "error"):
                return
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)


def _drain(results: Any, on_message: Callable[[str, Any], None]) -> bool:
    """Hand over what a failed rank sent before it exited; True when that included its failure message."""
    while True:
        try:
            kind, payload = results.get(timeout=0.5)
        except queue_mod.Empty:
            return False
        on_message(kind, payload)
        if kind in ("oom", "error"):
            return True


def run_torchrun_rank(job: TpJob, on_message: Callable[[str, Any], None]) -> None:
    """This process is one rank of a torchrun launch: run the job here; rank 0 delivers messages."""
    import torch.distributed as dist

    rank, world = torchrun_rank() or (0, 1)
    _join(rank, world, None, job.device)
    try:
        _run_rank(rank, world, job, (lambda m: on_message(*m)) if rank == 0 else (lambda _m: None))
    finally:
        dist.destroy_process_group()


def _generate_rank(rank: int, world: int, port: int, results: Any, args: tuple) -> None:
    import torch
    import torch.distributed as dist

    from tokcost.measure.loop import TORCH_DTYPES
    from tokcost.measure.model import build_model
    from tokcost.measure.runner import generate
    from tokcost.measure.shard import Shard

    specs, prompt, output_tokens, device, dtype, mode, seed = args
    _join(rank, world, port, device)
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    torch.set_num_threads(1)
    out = []
    for spec in specs:
        shard = Shard(rank=rank, world=world)
        model = build_model(spec, dtype=TORCH_DTYPES[dtype], device=dev, max_batch=len(prompt),
                            max_seq=len(prompt[0]) + output_tokens, seed=seed, shard=shard)  # fmt: skip
        out.append(generate(model, torch.tensor(prompt, device=dev), output_tokens, mode=mode).tolist())
    if rank == 0:
        results.put(out)
    dist.destroy_process_group()


def generate_tp(specs: list[Any], prompt: list[list[int]], output_tokens: int, world: int, *, device: str = "cpu",
                dtype: str = "fp32", mode: str = "eager", seed: int = 0) -> list[list[list[int]]]:  # fmt: skip
    """Greedy tokens of each model from `world` TP ranks (a check that TP computes what one device does)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    args = (specs, prompt, output_tokens, device, dtype, mode, seed)
    procs = [ctx.Process(target=_generate_rank, args=(r, world, port, results, args)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        return results.get(timeout=300)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
