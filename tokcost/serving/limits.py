"""Where one replica's load must stop, and what stops it: the KV cache, the engine's running cap, saturation.

The load is the mean decode batch b. Its bounds: prefill saturation (every step full of prefill, b -> E[n] C /
E[P'], or a little below where the prefill queue's budget runs out first); the running cap, the fewer of the
engine's cap on running sequences and the KV slots (the sequences the cache holds whole beside the shared prefix:
an engine admits a request only when the cache has room for it), a request holding its slot for its prefill, E[S],
and its decode, E[n] TPOT, so the cap's mean decode batch is c E[n] TPOT / (E[n] TPOT + E[S]) (time_cap_batch). An
open loop's request that finds every slot taken waits for one: M/M/c with c the cap (Erlang C), each slot held for
a request's life.
"""

from __future__ import annotations

import math

from tokcost.serving.queueing import erlang_c

Z_P99 = 2.326  # standard normal 99th percentile: the decode batch's swing, for the KV tokens a point reports
SATURATION_MARGIN = 1 - 1e-6
STABLE_TOLERANCE = 1e-3  # the stable batch's bracket, relative: the rate there is flat in the batch (1e-5: 1e-4)
QUEUE_FULL = 1 - 1e-6  # a backlog's share of the budget past which its queue has no steady state (waits of 1e6 s)
CLOSED_SATURATION = 0.98  # a closed loop's last admissible share of its saturation batch; users past it queue
CAP_PASSES, CAP_TOLERANCE = 8, 1e-3  # the running cap's batch by time: fixed-point passes, and their relative change


class ReplicaLimits:
    """The load range of a Replica (mixed into it: reads its KV capacity, lengths, loop and cap)."""

    def kv_slots(self) -> float:
        """Sequences the KV cache holds whole (the shared prefix once, each one's own prompt and answer)."""
        free = self.kv_capacity_tokens - self.kv_shared
        whole = self.steps.model.attended_tokens(self.traffic.prompt_mean_tokens + self.traffic.output.mean)
        per_sequence = whole - self.kv_shared
        return math.inf if per_sequence <= 0 else max(math.floor(free / per_sequence), 0)

    def time_cap_batch(self) -> float:
        """The mean decode batch the running cap holds by time: a slot is held for a request's prefill, E[S], and
        its decode, E[n] TPOT, so b = c E[n] TPOT / (E[n] TPOT + E[S]) (Little's law on the slots). Counted in steps
        (decoding_share) a prefill step weighs as a decode step, though it runs several times longer: one 32K-token
        prompt of Llama-3.1-70B on 2 x H100 holds its slot 4.2 s in 16 steps and 11.3 s in 299. A fixed point from
        the steps' share, at the states it gives."""
        cap, b = self.running_cap(), self.steps_cap_batch()
        if not math.isfinite(b) or self.rate_driven or not self.prompts:
            return b
        top = min(self.saturation_top(), self.stable_batch)
        for _ in range(CAP_PASSES):
            point = self.state(min(b, top))
            life = self.decode_steps_mean * point.tpot_mean_s
            held = life + point.service.mean
            if held <= 0 or not math.isfinite(held):
                break
            b, was = cap * life / held * SATURATION_MARGIN, b
            if abs(b - was) <= CAP_TOLERANCE * was:
                break
        return b

    def steps_cap_batch(self) -> float:
        """The running cap's mean decode batch counted in steps, c x decoding_share: an upper bound on its batch by
        time (a prefill step runs longer than a decode step), which sizes the curves before time_cap_batch can."""
        cap = self.running_cap()
        return cap * self.decoding_share() * SATURATION_MARGIN if math.isfinite(cap) else math.inf

    def decoding_share(self) -> float:
        """Share of its running slot's steps a request spends decoding: E[n] / (E[n] + E[chunks]). Every running
        sequence is in each step, either with a chunk of its prompt (its last one yields its first token) or
        decoding (a cap of 1 alternates one request's prefill and decode)."""
        n = self.decode_steps_mean
        chunks = sum(pt.weight * pt.chunks for pt in self.prompts)
        return n / (n + chunks) if n + chunks > 0 else 1.0

    def running_cap(self) -> float:
        """Sequences that may run at once (decoding or part-prefilled): the engine's cap and the KV slots, the
        sequences the cache holds whole. A request past them waits for a slot, as an engine admits one only when
        the cache has room for it (an open loop's wait: Erlang C, `_admission`)."""
        cap = float(self.max_running) if self.max_running is not None else math.inf
        return min(cap, self.kv_slots())

    def free_slots(self, b: float) -> float:
        """Running slots a decoder at batch b leaves for the prompts behind it: the cap less itself and the others."""
        return max(self.running_cap() - 1 - b, 0.0)

    def cap_share(self) -> float:
        """The running cap's decoding share, its batch over c: by time, E[n] TPOT / (E[n] TPOT + E[S]), once
        build_replica has set cap_batch, else by steps."""
        cap = self.running_cap()
        if not math.isfinite(cap) or cap <= 0 or self.cap_batch is None:
            return self.decoding_share()
        return self.cap_batch / (cap * SATURATION_MARGIN)

    def load_limits(self) -> dict[str, float]:
        """Each bound on the mean decode batch, by what imposes it: the running cap, labelled 'KV memory' where the
        KV slots are fewer than the engine's cap. (An open loop's bound was once the batch whose p99 Poisson swing
        fits the cache: where the cache holds about one sequence that is a batch near 0 and a fleet of 100,000
        replicas, where a server queues the requests and serves them one by one.)"""
        # the slots' batch by time once the curves cover it (build_replica), else counted in steps
        running = self.cap_batch if self.cap_batch is not None else self.steps_cap_batch()
        out = {"saturation": min(self.saturation_top(), self.stable_batch), "cap": max(running, 0.0)}
        if self.max_running is None or self.kv_slots() < self.max_running:
            out["KV memory"], out["cap"] = out["cap"], math.inf
        return out

    def saturation_top(self) -> float:
        """The last admissible share of the saturation batch (a closed loop's users past it queue for admission)."""
        return self.saturation_batch * (CLOSED_SATURATION if self.loop.closed else SATURATION_MARGIN)

    def queue_stable_batch(self) -> float:
        """The largest batch whose prefill queue has a steady state, where it falls short of the saturation batch
        (else infinity). At E[n] C / E[P'] Little's rate assumes E[S] = alpha E[P'] (full steps); a prompt's own
        chunks can cost less than the packed chunk at its mean offset, and that rate then outruns the budget a
        backlog drains, lambda alpha E[P'] < 1. Bisected on the states once the curves cover the batch, on that
        share itself (QUEUE_FULL): past the batch where it reaches 1, the steady-state solve has two branches, one
        with the share at 1 and one a hair under it (waits of 1e9 s), so a finite wait alone is no test."""
        top = self.saturation_top()
        if self.rate_driven or not self.prompts:
            return math.inf
        if not math.isfinite(top):  # steps apart: no saturation batch, so search up to the KV slots or the cap
            top = min((v for k, v in self.load_limits().items() if k != "saturation"), default=math.inf)
            if not math.isfinite(top):
                return math.inf
        if math.isfinite(self.state(top).wait_mean_s) and self._queue_holds(top * (1 - 1e-3)):
            return math.inf  # it holds up to saturation, where the budget fills as it must (fixed lengths: 1 - 3e-7)
        lo, hi = 0.0, top
        for short in (1e-3, 1e-2, 1e-1):  # it falls short by a fraction of a percent: bracket it from the top down
            below = top * (1 - short)
            if self._queue_holds(below):
                lo = below
                break
            hi = below
        while hi - lo > STABLE_TOLERANCE * hi:
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self._queue_holds(mid) else (lo, mid)
        return lo

    def _queue_holds(self, load: float) -> bool:
        """Whether the prefill queue has a steady state at `load`: its backlog uses under QUEUE_FULL of the budget."""
        point = self.state(load)
        return point.queue_rho < QUEUE_FULL and math.isfinite(point.wait_mean_s)

    def load_limit(self) -> float:
        """Largest admissible load: the mean decode batch (the rate for a prefill instance)."""
        if self.rate_driven:
            if self.kv_capacity_tokens < self.kv_shared + self.prompt_moments[0]:
                return 0.0
            _, _, alpha, _, d, _ = self._terms(0.0, None)  # saturated: every step full
            # both below 1: the steps' time, lambda E[S], and the packed budget a backlog drains, lambda alpha E[P']
            # (a prompt's own full chunks, cheaper than the packed chunk's mean offset, can make E[S] the smaller)
            return SATURATION_MARGIN / (alpha * self.prompt_moments[0] + max(d, 0.0))
        return min(self.load_limits().values())

    def limit_kind(self) -> str:
        """What caps the load when no SLO does: 'saturation', 'KV memory' or 'cap' (the engine's running cap)."""
        if self.rate_driven:
            return "saturation"
        limits = self.load_limits()
        return min(limits, key=lambda k: limits[k])

    def kv_bound(self) -> bool:
        """Whether KV capacity, not saturation or the engine's cap, caps the load."""
        return self.limit_kind() == "KV memory"

    def _admission(self, held: float, rate: float) -> tuple[float, float]:
        """(P(wait), mean wait given one) for a running slot in an open loop: M/M/c with c the running cap and
        `held` slots busy on average (decoding, or prefilling), each for held / rate seconds (Erlang C)."""
        c = self.running_cap()
        if self.loop.closed or not math.isfinite(c) or rate <= 0 or not math.isfinite(rate):
            return 0.0, 0.0
        p = erlang_c(c, held)
        if p <= 1e-9 or held >= c:
            return (0.0, 0.0) if held < c else (1.0, math.inf)
        return p, (held / rate) / (c - held)
