"""One continuous-batching replica in steady state: its decode batch, prefill queue and step mix at a load.

The scheduler (vLLM, SGLang, Sarathi-Serve with chunked prefill): every step runs one token for each of the
b sequences in decode plus up to C prompt tokens taken first-come-first-served from the prefill queue
(several prompts share a step when they fit), in one pass that reads the weights once. A prompt's first
token comes out of the step that runs its last chunk; it then decodes one token per step until its O tokens
are out. Notation: P' prompt tokens computed (beyond the cached prefix p0), n = O - 1 decode steps,
lambda arrivals/s (Poisson), b the time-average decode batch.

- Step times (steps.py): T0 = a decode-only step as a decoding sequence sees it (batch b + 1: itself plus
  the others, Poisson(b) by M/G/infinity); Tc = a full packed chunk step (C prompt tokens beside b decodes),
  alpha = Tc / C the prefill seconds per prompt token when steps are full.
- Prefill work per request S (seconds of prefill steps): its full chunks, plus s, the part of the step that
  runs its last chunk it accounts for: that step carries whoever joined the queue before it began, up to C
  prompt tokens (sharing.py), so s runs from the lone last step (nobody joined) to alpha l (a full step);
  e, its share of that step, runs from 1 to l / C. rho = lambda E[S] is the share of time in steps that carry
  prefill; prefill steps per request m = E[chunks - 1 + e]. Solved by a few fixed-point passes.
- The prefill queue: every step takes every waiting prompt up to C tokens, so a backlog (prompts left over
  for a later step) forms only as prompt tokens outrun the steps' budget: its chance is lambda alpha E[P'],
  the share of the budget used, and a prompt behind one waits the M/G/1 wait on packed work alpha P'. With
  no backlog a prompt waits out the step in progress (a decode step, a prefill step, or none when idle) and
  runs in the next, beside the decodes: a one-token prompt adds a sliver to a step, not a step.
- Decode (Little's law): a decoding sequence sees lambda m prefill steps and (1 - rho) / T0 decode-only
  steps per second, so TPOT = 1 / (lambda m + (1 - rho) / T0) and b = lambda E[n] TPOT. Given b this is
  linear in lambda, so the state is solved for the rate that produces a batch, with no iteration on b;
  b runs from 0 to the saturation batch E[n] C / E[P'] (every step full of prefill: rho -> 1) or to the
  KV limit, whichever is smaller.
- KV: the shared prefix once, each running sequence's own tokens at the 99th percentile of the batch
  (b + 2.33 sqrt(b)), and the prompt being prefilled must fit the replica's KV capacity.
Disaggregated pools reuse it: a prefill instance is a replica with no decode (its load is the rate), a
decode instance one with no prefill whose requests wait for their KV to arrive over the link.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from tokcost.engine.step import Scenario, Segment
from tokcost.models.spec import ModelSpec
from tokcost.serving.curve import Curve
from tokcost.serving.limits import Z_P99, ReplicaLimits
from tokcost.serving.loop import Loop
from tokcost.serving.queueing import (
    Moments,
    found_backlog,
    pollaczek_khinchine_wait,
    regula_falsi,
    wait_given_waiting,
)
from tokcost.serving.replica_steps import ReplicaCurves, bracket, interpolate, interpolate_sorted
from tokcost.serving.sharing import Joiners, step_share
from tokcost.serving.steps import Deployment, Shape, Steps, replica_kv_tokens
from tokcost.serving.traffic import OUTPUT_GRID_POINTS, PROMPT_GRID_POINTS, Traffic

if TYPE_CHECKING:
    from tokcost.serving.rounds import Round

Role = Literal["both", "prefill", "decode"]
ANCHOR_STRIDE = 4  # prompt grid points between two whose lone cost is priced by the engine
TAIL_ITERATIONS = 12  # fixed-point passes (_Damped) for how full each prompt's last step is
TAIL_TOLERANCE = 1e-4
MIN_WEIGHT = 1 / 64  # the least weight a fixed-point pass gives the map's new iterate (_Damped)
BACKLOG_TOLERANCE = 1e-7  # the rate's bracket against the life the backlog adds, relative
RATE_BISECTIONS = 24  # at most this many halvings of the rate when the last steps' fixed point cycles (near saturation)
RATE_TOLERANCE = 1e-5  # ... stopping once the rate's bracket is this narrow, relative


@dataclass(frozen=True, slots=True)
class PromptPoint:
    """One grid point of the computed-prompt distribution and its chunk schedule when alone."""

    tokens: int
    weight: float
    chunks: int
    full: Shape  # one full chunk at the mean offset of its full chunks (empty when a single chunk)
    tail: Shape  # the last chunk

    def last_chunk(self, chunk: int) -> int:
        """Tokens in its last chunk."""
        return self.tokens - (self.chunks - 1) * chunk


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """The replica's steady state at one load: rate, batch, prefill share, step times, prefill work."""

    batch: float
    rate_rps: float
    rho: float  # share of time in steps that carry prefill (the prefill queue's utilization)
    decode_step_s: float  # T0
    chunk_step_s: float  # Tc
    prefill_step_s: float  # mean duration of a step that carries prefill
    tpot_mean_s: float
    steps_per_request: float  # m
    service: Moments  # prefill work S per request
    wait_mean_s: float  # Pollaczek-Khinchine mean wait
    wait_shape: float  # gamma shape of the wait of a prompt that waits (1: exponential)
    alone_s: tuple[float, ...]  # lone prefill cost A(P') per prompt grid point
    last_steps: tuple[tuple[float, float], ...]  # per grid point (e, s): its share of the step of its last chunk,
    # and the seconds of that step it accounts for (sharing.py)
    kv_tokens_p99: float
    queue_rate_rps: float = 0.0  # the arrival rate the prefill queue sees while busy (loop.py; open loop: the rate)
    queue_rho: float = 0.0  # P(a prompt waits behind a backlog): lambda alpha E[P'], the share of the budget used
    queue_others: float = 1.0  # ... of which the other users' share (a closed loop's (N - 1) / N: the arrival theorem)
    admission_wait_s: float = 0.0  # closed loop past the load limit: each request's wait for a running slot
    admission_p: float = 0.0  # open loop: chance a request finds every running slot taken (Erlang C)
    admission_mean_s: float = 0.0  # ... and its mean wait for one then (exponential)
    prefill_share: float = 0.0  # the share of steps an arrival finds carrying prefill (open loop: of time)
    prefill_apart: bool = False  # prefill steps decode nothing: decoders wait each one out whole
    # a request starts decoding behind the prompts that queued while its own waited and ran (held_backlog): the
    # mean busy period left then, given one is (0: none priced, a closed loop), the share of it a decoder loses,
    # and TPOT without it (Little's tpot_mean_s holds it)
    backlog_busy_s: float = 0.0
    backlog_keep: float = 0.0
    tpot_steady_s: float = 0.0
    backlog_room: float = 1.0
    # decoders enter in clumps (clumped_companions): the others of its busy period a decoding sequence meets in its
    # decode-only steps beyond Poisson(b), and the life that adds per decode step to one that starts behind a backlog
    clump: float = 0.0
    clump_step_s: float = 0.0
    clump_sojourn_s: float = 0.0  # E[T] it counts from: the wait and prefill, as far as the free slots reach
    # a closed loop that runs in whole lock-step rounds (rounds.py): its latencies and rate, exact; None: the closed
    # form's mixture
    round: Round | None = None

    @property
    def decode_share(self) -> float:
        """kappa: the share of a prefill step that decodes alone would not have spent, 1 - T0 / Tp when the step
        also decodes the batch; all of it (1) when prefill runs in steps of its own and decoders wait it out."""
        if self.prefill_apart:
            return 1.0 if self.prefill_step_s > 0 else 0.0
        return max(1 - self.decode_step_s / self.prefill_step_s, 0.0) if self.prefill_step_s > 0 else 0.0

    def held_backlog(self, n: float) -> Moments:
        """The life a request with n decode steps adds by decoding behind the backlog it finds (held_backlog)."""
        return held_backlog(self.rho, self.backlog_busy_s, self.wait_shape, self.backlog_keep, n * self.prefill_step_s,
                            self.prefill_apart, n * self.clump_step_s)  # fmt: skip

    @property
    def wait_if_waiting_s(self) -> float:
        """theta = E[W] / P(wait): mean wait of a prompt that finds the prefill queue busy."""
        return self.wait_mean_s / self.queue_rho if self.queue_rho > 0 else 0.0


def held_backlog(
    chance: float, busy_s: float, shape: float, keep: float, life_steps_s: float, apart: bool, clump_s: float = 0.0
) -> Moments:
    """The life a request adds by starting to decode behind the prefill backlog it leaves: the prompts that arrived
    while its own waited and ran are queued when its first token comes out, so its decode starts inside a prefill
    busy period with chance rho (an M/G/1 departure leaves the queue as a time-random moment finds it), whose rest
    lasts E[T] / (1 - rho) on average (E[T] its own wait and prefill: lambda E[T] prompts left behind, each a busy
    period E[S] / (1 - rho); fewer where the running cap has no slot for them all), a gamma of the wait's shape (the
    work left behind is what an arrival finds: long-tailed prompts leave rare long backlogs, fixed ones steady
    ones). Every step of that rest carries prefill: mixed steps give it a token each, so it holds at most its n
    steps' worth (life_steps_s, n Tp), and it loses `keep` = 1 - TPOT / Tp of it against steps as a time-random
    life meets them; steps apart give none (it loses all of it, uncapped). Long prompts and short answers live
    inside their successors' prefills: 32,768-token prompts with 128-token answers on an H200 had p50 TPOT 6 ms
    priced against 34 simulated at 0.7 of saturation. Such a request then decodes beside the clump its busy period
    let out (clumped_companions), which slows its decode-only steps: `clump_s`, the life that adds given a backlog
    (the simulation's requests that start behind none live as Little's steady TPOT has it, within 2%)."""
    if chance <= 0 or busy_s <= 0 or keep <= 0:
        return Moments(0.0)
    if math.isinf(busy_s):  # an endless backlog: its whole life in prefill steps, or no end with steps apart
        return Moments(math.inf) if apart else Moments(chance * life_steps_s * keep)
    rest = Moments.gamma_capped(busy_s, shape, math.inf if apart else life_steps_s).scaled(keep) + Moments(clump_s)
    return Moments.mixture([(1 - chance, Moments(0.0)), (chance, rest)])


def clumped_companions(rate: float, sojourn_s: float, service_s: float, rho: float, life_s: float) -> float:
    """Others a decoding sequence meets in its decode-only steps beyond the Poisson(b) the batch's mean gives: decoders
    enter in clumps, as the prefill queue's busy periods let them out. The prompts served in the rest of its own busy
    period outnumber the Poisson count over that time by lambda E[T] on average (E[T] = E[W] + E[S]: the prompts it
    leaves behind, Little), and those served before it in that period as many, by symmetry; all of them decode beside
    it once the period ends, where its decode-only steps run. The emptied queue then refills (no departures while it
    is idle) and the excess fades over a busy-idle cycle C = E[S] / (rho (1 - rho)), so a life L longer than C meets
    it for C / L of its steps: x = 2 lambda E[T] min(1, C / L). At most the decodes the service rate lets out over
    the life beyond Poisson's, L (1 - rho) / E[S] (near saturation, with prefill beside the decodes, every step is a
    prefill step and the excess goes; with prefill apart L grows as 1 / (1 - rho) and it stays under E[n] T0 / E[S]).
    The caller keeps x within the running cap's free slots (the prompts behind it wait for those).
    A 16,384-token prompt with a 64-token answer on an H100 at 0.5 of saturation meets 1.36 more than b + 1 in the
    simulation's decode-only steps, where this gives 1.13 (the cap binds), and the mean TPOT it leads to is within 1%
    of the simulation's at 0.3-0.7 of saturation (6-8% short without it). Past 0.7 of saturation the simulation's
    excess falls (below Poisson's at 0.9, where decode-only steps come only as long busy periods end), which this
    does not follow: there the mean runs further over (README, known misses)."""
    if rate <= 0 or service_s <= 0 or not 0 < life_s < math.inf or not 0 < rho < 1:
        return 0.0
    share = min(1.0, busy_idle_cycle(service_s, rho) / life_s)
    excess = 2 * rate * sojourn_s * share if math.isfinite(sojourn_s) else math.inf
    return min(excess, life_s * (1 - rho) / service_s)


def busy_idle_cycle(service_s: float, rho: float) -> float:
    """C: a prefill busy period and the idle time after it, E[S] / (1 - rho) + 1 / lambda = E[S] / (rho (1 - rho))."""
    return service_s / (rho * (1 - rho))


Lasts = tuple[tuple[float, float], ...]  # (e, s) per prompt grid point: share of its last step, seconds of it


@dataclass(frozen=True, slots=True)
class Backlog:
    """held_backlog's terms at one rate: the busy period's mean rest, the share a decoder loses, TPOT without it,
    and the life it adds on average over requests (0 where none is priced)."""

    busy_s: float = 0.0
    keep: float = 0.0
    steady_s: float = 0.0
    life_s: float = 0.0
    room: float = 1.0  # the share of the prompts left behind that the running cap has slots for
    clump: float = 0.0  # the others of its busy period a decoder meets beyond Poisson(b) (clumped_companions)
    clump_step_s: float = 0.0  # ... and the life they add per decode step to a request that starts behind a backlog
    clump_sojourn_s: float = 0.0  # E[T] it counts from (within the running cap's free slots)


@dataclass(frozen=True, slots=True)
class _Sweep:
    """One pass of the steady state's fixed point: the rate, the last steps it leads to, and its LoadPoint."""

    rate: float
    lasts: Lasts
    point: Callable[[Lasts | None], LoadPoint]


Alone = tuple[tuple[float, ...], tuple[float, ...]]  # lone prefill cost A per grid point, and its last step's part


@dataclass(frozen=True, slots=True)
class Queue:
    """The prefill queue as arrivals meet it: their rate, the share of steps carrying prefill, the backlog's
    chance (lambda alpha E[P'], the share of the prefill budget used: 1 at saturation), and P(others decode)."""

    rate: float
    steps: float
    backlog: float
    decoding: float
    others: float = 1.0  # the share of the arrivals that are other users' (a closed loop's (N - 1) / N), in `rate`

    def landing(self) -> tuple[float, float]:
        """(P(a prefill step with no backlog behind it is in progress), P(a decode-only step is))."""
        return max(self.steps - self.backlog, 0.0), (1 - self.steps) * self.decoding


class Replica(ReplicaLimits, ReplicaCurves):
    """Closed form of one replica's steady state, for any load up to saturation."""

    def __init__(
        self, steps: Steps, traffic: Traffic, chunk: int, kv_capacity_tokens: float, role: Role = "both",
        transfer_s: float = 0.0, max_running: int | None = None, client_side: bool = True, prefill_apart: bool = False,
    ):  # fmt: skip
        self.steps, self.traffic, self.chunk, self.role = steps, traffic, chunk, role
        # prefill in steps of its own (the engine's scheduler, profiles.Scheduler): decodes wait each one out
        self.prefill_apart = prefill_apart
        self.kv_capacity_tokens = kv_capacity_tokens
        self.max_running = max_running  # the engine's cap on running sequences (None: the KV cache alone)
        self.scheduler_steps = 1  # multi-step scheduling: a new prompt joins at the end of a window of k steps
        self.lookahead = False  # overlap scheduling: each step's requests are chosen while the step before it runs
        self.transfer_s = transfer_s  # decode instances: the KV's trip from the prefill pool, before decoding
        self.client_side = client_side  # TTFT and E2E as a client times them (overhead_s), else at the engine
        self.loop = Loop.of(traffic, self.request_cost_s)
        p, o, p0 = traffic.prompt, traffic.output, traffic.cached_prefix_tokens
        prefills, decodes = role != "decode", role != "prefill"
        self.prompt_powers = tuple(p.moment(k) if prefills else 0.0 for k in range(1, 7))  # E[P'^1..6]
        self.prompt_moments = self.prompt_powers[:3]  # (the queue's three; the packed work's moments read six)
        self.decode_steps_mean = max(o.moment(1) - 1, 0.0) if decodes else 0.0  # E[n]
        grid = p.grid(PROMPT_GRID_POINTS) if prefills else []
        self.prompts = [self._prompt_point(round(max(v, 1)), w) for v, w in grid]
        self.outputs = [(max(round(v) - 1, 0), w) for v, w in o.grid(OUTPUT_GRID_POINTS)] if decodes else []
        # lone prefill costs come from step-time curves at every ANCHOR_STRIDE-th grid point and the last;
        # the points between take the excess over the packed cost, A - alpha P', linearly in P'
        # and at both ends of every run of equal chunk counts: a prompt one token past a chunk costs a whole step
        counts = [pt.chunks for pt in self.prompts]
        edges = {
            i
            for i in range(len(counts))
            if counts[i] != counts[max(i - 1, 0)] or counts[i] != counts[min(i + 1, len(counts) - 1)]
        }
        self.anchors = sorted({*range(ANCHOR_STRIDE // 2, len(grid), ANCHOR_STRIDE), len(grid) - 1, *edges} - {-1})
        anchor_tokens = [self.prompts[i].tokens for i in self.anchors]
        self._brackets = [bracket(anchor_tokens, pt.tokens) for pt in self.prompts]
        e1, e2 = self.prompt_moments[0], self.prompt_moments[1]
        token_weighted = e2 / e1 if e1 else 1.0  # the prompt an average prompt token sits in (length-biased)
        if chunk <= token_weighted:  # a full chunk at the offset whose attention matches the average token's
            self.packed: Shape = (Segment(1, p0 + (token_weighted - chunk) / 2, chunk),)
        else:  # a full chunk holds several whole prompts
            self.packed = (Segment(chunk / token_weighted, p0, token_weighted),)
        # where a waiting prompt's end falls inside its last full step, as a share of the chunk: fixed
        # lengths land on a lattice of chunk / gcd(P', C) positions, (q - 1) / (2 q) on average; else 1/2
        q = chunk // math.gcd(round(p.mean), chunk) if p.kind == "fixed" else 0
        self.align = (q - 1) / (2 * q) if q else 0.5
        # every step full of prefill: mixed steps still decode the whole batch, b -> E[n] C / E[P']; steps apart
        # decode nothing then, so the batch grows without bound as rho -> 1 (the KV cache or the cap stops it)
        mixed = e1 and decodes and not prefill_apart
        self.saturation_batch = self.decode_steps_mean * chunk / e1 if mixed else math.inf
        self.stable_batch = math.inf  # where the prefill queue's budget runs out first (build_replica sets it)
        self.cap_batch: float | None = None  # the running cap's batch by time (build_replica sets it; else steps')
        model = steps.model
        self.kv_shared = model.attended_tokens(p0)
        self.kv_private = model.attended_tokens(steps.decode_context) - self.kv_shared if decodes else 0.0
        self._curves: tuple[Curve, Curve] | None = None
        self._anchor_curves: list[tuple[int, Curve | None, Curve, int, int]] | None = None
        self._prefix_slope: float | None = None
        self._fill_curves: tuple[tuple[int, ...], tuple[Curve, ...]] | None = None

    def _prompt_point(self, tokens: int, weight: float) -> PromptPoint:
        c, p0 = self.chunk, self.traffic.cached_prefix_tokens
        chunks = -(-tokens // c)
        full = (Segment(1, p0 + (chunks - 2) * c / 2, c),) if chunks > 1 else ()
        tail = (Segment(1, p0 + (chunks - 1) * c, tokens - (chunks - 1) * c),)
        return PromptPoint(tokens, weight, chunks, full, tail)

    def prefill_batch(self, b: float) -> float:
        """The decodes a step that carries prefill runs beside it: the batch b, or none when prefill runs apart."""
        return 0.0 if self.prefill_apart else b

    @property
    def rate_driven(self) -> bool:
        """No decode batch here (a prefill instance, or one-token answers): the load is the rate itself."""
        return self.role == "prefill" or self.decode_steps_mean == 0

    @property
    def decodes(self) -> bool:
        """Whether some request decodes here (output above one token, and not a prefill-only instance)."""
        return any(n >= 1 for n, _ in self.outputs)

    # ---- steady state ----------------------------------------------------------------------------------

    def state(self, load: float) -> LoadPoint:
        """Steady state at `load`: the mean decode batch, solved for the rate that produces it (a prefill
        instance: the rate itself)."""
        if self.rate_driven:
            return self._prefill_state(load)
        b = load
        if not self.prompts:
            t0 = self._decode_step(b)
            rate = b / (self.decode_steps_mean * t0) if self.decode_steps_mean else 0.0
            return self._point(b, rate, 0.0, t0, t0, t0, t0, 0.0, Moments(0.0), (), ())
        point = self._solve(b, 1.0)
        if not self.loop.closed:
            return point
        # a lone user's prompt runs with no one decoding beside it: none of the batch is there (its own decode is
        # not); from two users on, the others decode as the time average has it (fewer would let Little's rate
        # outrun the prefill: a few users with long prompts are queued for it, not decoding), linear between
        users = self.users_estimate(point)
        beside = min(max(users - 1, 0.0), 1.0) if math.isfinite(users) else 1.0
        # the arrival theorem: a user's prompt meets the queue of the N - 1 others (Schweitzer's (N - 1) / N of its
        # rate), never its own: one user of 16,384-token prompts and 64-token answers on an H100 had queued behind
        # itself (p50 TTFT 20% over the simulation's lone prefill)
        others = _others_of(users)
        return self._solve(b, beside, point.last_steps, others) if beside < 1 or others < 1 else point

    def _solve(self, b: float, beside: float, start: Lasts | None = None, others: float = 1.0) -> LoadPoint:
        """The steady state at decode batch b, with `beside` x b sequences decoding during a prefill step (1: the
        time average, as an open loop's arrival sees it; 0: a lone user's); the last steps' fixed point starts
        from `start` (a nearby state's) when given; `others`: the share of the arrivals a prompt queues behind (a
        closed loop's other users').

        Near saturation the fixed point can cycle: fuller last steps lower the rate, which empties the backlog,
        which leaves the last steps less full. The map is continuous but steep as the budget's use nears 1, so
        then the rate itself is bisected: at a fixed rate the last steps settle, and the rate they imply by
        Little falls as the rate rises (halvings of the bracket the cycle spans, to RATE_TOLERANCE)."""
        lone, rates, damped = start, [], _Damped()
        for _ in range(TAIL_ITERATIONS):
            sweep = self._sweep(b, beside, lone, others=others)
            rates.append(sweep.rate)
            lone, done = damped(lone, sweep.lasts)
            if done:
                return sweep.point(lone)
        lo, hi = min(rates[-4:]), max(rates[-4:])
        if not (0 < lo < hi < math.inf):
            return sweep.point(lone)
        for _ in range(RATE_BISECTIONS):
            if hi - lo <= RATE_TOLERANCE * hi:
                break
            mid = (lo + hi) / 2
            lone = self._settle(b, beside, lone, mid, others)
            lo, hi = (mid, hi) if self._sweep(b, beside, lone, others=others).rate > mid else (lo, mid)
        rate = (lo + hi) / 2
        lone = self._settle(b, beside, lone, rate, others)
        return self._sweep(b, beside, lone, rate, others).point(lone)

    def _settle(self, b: float, beside: float, lasts: Lasts | None, rate: float, others: float) -> Lasts | None:
        """The last steps' fixed point with the rate held at `rate`."""
        damped = _Damped()
        for _ in range(TAIL_ITERATIONS):
            lasts, done = damped(lasts, self._sweep(b, beside, lasts, rate, others).lasts)
            if done:
                break
        return lasts

    def _sweep(
        self, b: float, beside: float, lasts: Lasts | None, rate: float | None = None, others: float = 1.0
    ) -> _Sweep:
        """One pass at batch b from last steps `lasts`: the rate Little gives (or `rate`, held), the queue it
        feeds and the last steps that queue leaves."""
        m1, m2, m3 = self.prompt_moments
        n = self.decode_steps_mean
        t0, tc, alpha, (alone, prev), d, m = self._terms(b, lasts)
        e_s = alpha * m1 + d
        solved = rate is None
        if rate is None:
            # Little for decodes, with f b decoding beside a prefill step and the rest of the batch in decode steps:
            # b (f lambda m + (1 - f lambda E[S]) / T0) = lambda n, linear in lambda; prefill steps apart give no
            # token (m of them count 0)
            denominator = n - beside * b * self._tokens_per_prefill_step(m) + beside * b / t0 * e_s
            rate = (b / t0 / denominator if denominator > 0 else math.inf) if b > 0 else 0.0
            if beside < 1 and e_s > 0:  # fewer decoding beside a prefill step lets Little's rate outrun the prefill
                rate = min(rate, 1 / e_s)  # itself: a closed loop's prompts never take more than all of the time
        service = _affine_moments(alpha, d, m1, m2, m3)
        backlog = self._backlog(b, rate, service, alpha, t0, m)
        if solved and backlog.life_s > 0:
            # the backlog each request decodes behind adds D to its life: b = lambda (E[n] TPOT + D), so it
            # costs D / TPOT steps' tokens more (the steps it holds give fewer). D rises with the rate (without
            # bound as the queue fills, where steps apart starve the decodes), so the rate Little gives falls with
            # it: lambda - Little(lambda) rises from below 0 at 0 to at least 0 at the rate without D
            def little(x: float) -> float:
                held = self._backlog(b, x, service, alpha, t0, m)
                return b / t0 / (denominator + held.life_s / held.steady_s) if held.life_s > 0 else top

            top = rate
            excess = top - little(top)
            if excess > 0:
                lo, hi = regula_falsi(lambda x: x - little(x), 0.0, top, -little(0.0), excess, BACKLOG_TOLERANCE)
                rate = (lo + hi) / 2
            backlog = self._backlog(b, rate, service, alpha, t0, m)
        rho = min(rate * e_s, 1.0)
        # Little's TPOT, b / (lambda n): the formula's own, and never below T0 when rho would pass 1 (every step
        # carrying prefill is no saturation: tiny prompts share each step)
        tpot = b / (rate * n) if 0 < rate < math.inf else t0
        busy = e_s / (1 - min(rho, 0.99))  # M/G/1 mean busy period
        q_rate = self.loop.queue_rate(rate, step_s=tpot, prefill_step_s=e_s / m, busy_s=busy) * others
        queue = Queue(q_rate, min(q_rate * e_s, 1.0), min(q_rate * alpha * m1, 1.0), -math.expm1(-b), others)
        new = self._last_steps(queue, alpha, b, prev, steps=(t0, e_s / m, tpot))

        def point(lone: Lasts | None) -> LoadPoint:
            return self._point(b, rate, rho, t0, tc, e_s / m, tpot, m, service, alone, lone, queue, backlog)

        return _Sweep(rate, new, point)

    def _backlog(self, b: float, rate: float, service: Moments, alpha: float, t0: float, m: float) -> Backlog:
        """What the prefill backlog a request leaves behind adds to its decode (held_backlog), at this rate: the
        rest of the busy period, from its own wait (Pollaczek-Khinchine on packed work, as the point's) and its
        prefill. A closed loop's users come back in step with the decodes that freed them (loop.py): not priced."""
        rho = rate * service.mean
        if self.loop.closed or not self.outputs or m <= 0 or not 0 < rho < 1:
            return Backlog()
        tp = service.mean / m
        steady = self._steady_tpot(rate, rho, t0, m)
        packed, used = self.packed_moments(alpha), min(rate * alpha * self.prompt_moments[0], 1)
        wait = pollaczek_khinchine_wait(rate, packed, used)  # infinite past the queue's edge: an endless backlog
        shape = wait_given_waiting(rate, packed, used)[1] if 0 < used < 1 else 1.0
        # the prompts behind it run only in the slots the running cap leaves beside it and the other decoders: a
        # cache that holds one request queues them for admission, and nothing prefills while it decodes
        own, slots = wait + service.mean, self.free_slots(b)
        room = min(slots / (rate * own), 1.0) if rate * own > 0 else 1.0
        busy = min(own, slots / rate) / (1 - rho)
        keep = 1.0 if self.prefill_apart else max(1 - steady / tp, 0.0)
        # the clump slows its decode-only steps by its count times the step's slope in the batch, and Little's steady
        # TPOT with them (the longer life meets more prefill steps too); that falls on the requests that start
        # behind a backlog (chance rho). Its companions are the prompts behind it, so only those the running cap
        # has slots for; none where no backlog is priced or an endless one leaves no decode-only step
        clump, slow, sojourn = 0.0, 0.0, 0.0
        if 0 < busy < math.inf and keep > 0:
            sojourn, life = min(own, slots / rate), self.decode_steps_mean * steady
            clump = min(clumped_companions(rate, sojourn, service.mean, rho, life), slots)
            slow = (self._steady_tpot(rate, rho, t0 + self.decode_slope(b + 1) * clump, m) - steady) / rho
        held = self.held_life(lambda k: held_backlog(rho, busy, shape, keep, k * tp, self.prefill_apart, k * slow))
        return Backlog(busy, keep, steady, held, room, clump, slow, sojourn)

    def held_life(self, held: Callable[[float], Moments]) -> float:
        """D: the life the backlog adds, on average over requests (`held` of a request's n decode steps)."""
        return sum(w * held(k).mean for k, w in self.outputs if k)

    def _tokens_per_prefill_step(self, m: float) -> float:
        """Tokens a decoding sequence gets from a request's m prefill steps: m when they decode too, none apart."""
        return 0.0 if self.prefill_apart else m

    def _prefill_state(self, rate: float) -> LoadPoint:
        m1, m2, m3 = self.prompt_moments
        lone, damped = None, _Damped()
        q_rate = rate
        for _ in range(TAIL_ITERATIONS):
            t0, tc, alpha, (alone, lasts), d, m = self._terms(0.0, lone)
            rho = min(rate * (alpha * m1 + d), 1.0)
            service = _affine_moments(alpha, d, m1, m2, m3)
            others = q_rate / rate if 0 < rate < math.inf else 1.0
            queue = Queue(q_rate, min(q_rate * (alpha * m1 + d), 1.0), min(q_rate * alpha * m1, 1.0), 0.0, others)
            new = self._last_steps(queue, alpha, 0.0, lasts, steps=(t0, service.mean / m, t0))
            lone, done = damped(lone, new)
            point = self._point(0.0, rate, rho, t0, tc, service.mean / m, 0.0, m, service, alone, lone, queue)
            q_rate = self._others_rate(rate, point)
            if done and q_rate == queue.rate:
                break
        return point

    def _others_rate(self, rate: float, pt: LoadPoint) -> float:
        """The arrival rate the prefill queue shows an arrival when nothing decodes (one-token answers): an open
        loop's whole rate; in a closed loop only the other users' (the arrival theorem: an arrival meets the queue of
        N - 1 users, Schweitzer's (N - 1) / N of it), N by Little on a user's cycle at this queue's wait. A user had
        queued behind itself: one user of 1,024 tokens on an H100 priced p90 TTFT 65 ms where it runs in 23."""
        if not self.loop.closed or self.role == "prefill" or not math.isfinite(rate) or rate <= 0:
            return rate  # (a disaggregated prefill pool's users spend their decode elsewhere: not counted here)
        return rate * _others_of(self.users_estimate(pt))

    def _terms(self, b: float, lasts: Lasts | None) -> tuple[float, float, float, Alone, float, float]:
        """(T0, Tc, alpha, (A, A's last step) per grid point, d = E[S - alpha P'], prefill steps per request m) at
        batch b, each request's prefill time S being its full chunks alone plus s of its last step (`lasts`: (e, s)
        per grid point; None: every step full, e = l / C, s = alpha l)."""
        c = self.chunk
        decode, packed = self._main_curves()
        beside = self.prefill_batch(b)
        t0, tc = self._decode_step(b), packed(beside)
        alpha = tc / c
        alone = self._alone(beside, alpha)
        d = m = 0.0
        for k, (pt, a, a_last) in enumerate(zip(self.prompts, *alone, strict=True)):
            last = pt.last_chunk(c)
            e, s = (last / c, alpha * last) if lasts is None else lasts[k]
            d += pt.weight * (a - a_last + s - alpha * pt.tokens)
            m += pt.weight * (pt.chunks - 1 + e)
        return t0, tc, alpha, alone, d, m

    def _last_steps(
        self, queue: Queue, alpha: float, b: float, lasts: tuple[float, ...], *, steps: tuple[float, float, float]
    ) -> Lasts:
        """(e, s) per grid point (sharing.py): its share of the step of its last chunk and the seconds it accounts for.

        Who joins its last step arrives in the window before that step: its own full chunks, plus what it waited
        for: a backlog (an open loop's: the queue of steps TTFT prices, queueing.found_backlog, where a step takes
        every queued prompt up to the chunk, so a prompt a quarter of the chunk waits one only when the step before
        it overflows; M/G/1's chance, the share of the budget used, had packed 2.5-2.8 such prompts a step where the
        simulation runs 1.8-2.1, TTFT and TPOT p50 up to 60% over at 0.9 of saturation; a closed loop's: M/G/1 on
        packed prompt work, gamma wait, and a step-locked arrival's rest of the step too),
        or, with none, the step in progress (a prefill step, a decode step or none; a one-chunk prompt's step
        serves everyone who came during that step, a longer prompt's last chunk those after it).
        """
        t0, tp, step = steps
        c = self.chunk
        if not math.isfinite(queue.rate) or queue.backlog >= 1:
            return tuple((p.last_chunk(c) / c, alpha * p.last_chunk(c)) for p in self.prompts)
        if self.loop.closed:
            theta, shape = wait_given_waiting(queue.rate, self.packed_moments(alpha), queue.backlog)
        else:  # time-random arrivals find the queue of steps TTFT prices (ttft.time_random_backlog), not M/G/1's
            chance, theta, shape = found_backlog(queue.rate, queue.steps, tp, alpha * c, self.work_tokens(alpha), c)
            if not math.isfinite(theta):  # a backlog without end: every step full
                return tuple((p.last_chunk(c) / c, alpha * p.last_chunk(c)) for p in self.prompts)
            queue = replace(queue, backlog=chance)
        w = self.loop.step_share(step)  # step-locked arrivals (closed loop): the whole step they land in
        lone, decoding = queue.landing()
        idle = max(1 - queue.backlog - lone - decoding, 0.0)
        joiner = self.prompt_moments[0]
        fills = self.fill_steps(self.prefill_batch(b))
        out = []
        for pt, a_last in zip(self.prompts, lasts, strict=True):
            own = alpha * (pt.chunks - 1) * c
            part = 1.0 if pt.chunks == 1 else 0.5  # of the step in progress, the arrivals it shares its last step with
            last = pt.last_chunk(c)
            base = interpolate(*fills, last)

            def step_s(xs: list[float], a_last: float = a_last, base: float = base) -> list[float]:
                return [a_last + v - base for v in interpolate_sorted(*fills, xs)]  # its last step with x tokens

            rest = own + w * self.loop.residual(step) + (1 - w) * part * tp  # a backlog's step is a prefill step
            branches = [(queue.backlog, Joiners(queue.rate * rest, queue.rate * theta, shape)), (idle, Joiners(
                queue.rate * own))] + [(p, Joiners(queue.rate * (own + (w + (1 - w) * part) * x))) for p, x in
                                       ((lone, tp), (decoding, t0))]  # fmt: skip
            shares = [(p, step_share(last, c, joiner, j, step_s)) for p, j in branches if p > 0]
            total = sum(p for p, _ in shares) or 1.0
            out.append((sum(p * e for p, (e, _) in shares) / total, sum(p * x for p, (_, x) in shares) / total))
        return tuple(out)

    def packed_moments(self, alpha: float) -> Moments:
        """Moments of a queued prompt's packed prefill work w (what a backlog drains at): alpha times its work in
        tokens (work_tokens)."""
        m1, m2, m3 = self.work_tokens(alpha)
        return _affine_moments(alpha, 0.0, m1, m2, m3)

    def work_tokens(self, alpha: float) -> tuple[float, float, float]:
        """Raw moments of a queued prompt's packed work in tokens of the full packed step, w / alpha.

        Each of its chunks attends over the ones before it, so its work is c0 P' + c1 P'^2 / 2 (c1 the prefix slope),
        not alpha P': alpha prices every token at the average token's prefix (E[P'^2] / (2 E[P'])), so the mean is the
        same but a long prompt's work is longer than its tokens say, and a backlog's variance with it. w / alpha =
        (1 - k t) P' + k P'^2, k = c1 / (2 alpha), t = E[P'^2] / E[P']. Qwen3-30B-A3B on an H200, lognormal 5,000-token
        prompts (cv 0.8) in 2,048-token chunks at 0.8 of saturation: M/G/1 on alpha P' waited 308 ms given a wait
        where the prompts' own work waits 402, and the simulation's p90 TTFT was 34% over the closed form's."""
        m1, m2, m3 = self.prompt_moments
        k = self.work_slope(alpha)
        if k <= 0:
            return m1, m2, m3
        a, p = 1 - k * m2 / m1, self.prompt_powers
        raw2 = a * a * p[1] + 2 * a * k * p[2] + k * k * p[3]
        raw3 = a**3 * p[2] + 3 * a * a * k * p[3] + 3 * a * k * k * p[4] + k**3 * p[5]
        return m1, raw2, raw3

    def work_slope(self, alpha: float) -> float:
        """k = c1 / (2 alpha): how much faster than its tokens a prompt's packed work grows (work_tokens), at most 1 / t
        (then a token's whole cost is its attention, c0 = 0)."""
        m1, m2, _ = self.prompt_moments
        if m1 <= 0 or alpha <= 0:
            return 0.0
        return min(self.prefix_slope() / (2 * alpha), m1 / m2)

    def _point(  # noqa: ANN001
        self, b, rate, rho, t0, tc, tp, tpot, m, service, alone, lone, queue=None, backlog=None
    ) -> LoadPoint:
        kv = self.kv_shared + (b + Z_P99 * math.sqrt(b)) * self.kv_private + rho * self.prompt_moments[0]
        queue = queue if queue is not None else Queue(rate, rho, rho, 0.0)
        backlog = backlog or Backlog()
        packed = self.packed_moments(tc / self.chunk)
        wait = pollaczek_khinchine_wait(queue.rate, packed, queue.backlog) if queue.backlog > 0 else 0.0
        shape = wait_given_waiting(queue.rate, packed, queue.backlog)[1] if queue.backlog > 0 else 1.0
        p_admit, admit_s = self._admission(b + queue.steps, rate)
        return LoadPoint(b, rate, rho, t0, tc, tp, tpot, m, service, wait, shape, alone, lone, kv, queue.rate,
                         queue.backlog, admission_p=p_admit, admission_mean_s=admit_s,
                         prefill_share=queue.steps, prefill_apart=self.prefill_apart, queue_others=queue.others,
                         backlog_busy_s=backlog.busy_s, backlog_keep=backlog.keep,
                         tpot_steady_s=backlog.steady_s, backlog_room=backlog.room, clump=backlog.clump,
                         clump_step_s=backlog.clump_step_s, clump_sojourn_s=backlog.clump_sojourn_s)  # fmt: skip

    def lock_step(self) -> Replica | None:
        """The same replica with its users in lock-step groups (loop.py: the other end of the range), or None
        when they cannot lock (an open loop, or lengths that vary)."""
        if not self.loop.lockable:
            return None
        locked = copy.copy(self)
        locked.loop = replace(self.loop, locked=1.0)
        locked.stable_batch = locked.queue_stable_batch()  # its own loop's (the steady states never read it)
        return locked

    @property
    def request_cost_s(self) -> float:
        """The engine's per-request cost (HTTP, tokenization, scheduling): it sits between a client's send and the
        scheduler, so it is in every closed-loop client's cycle, whoever times the request."""
        return self.steps.request_overhead_s

    @property
    def overhead_s(self) -> float:
        """The per-request cost on the TTFT and E2E reported: a client's clock holds it, the engine's does not."""
        return self.request_cost_s if self.client_side else 0.0

    def users_estimate(self, pt: LoadPoint) -> float:
        """Closed loop: the users this state holds, by Little without the TTFT model (decoding, queued, in their
        lone prefill, on their way back or thinking); an open loop has no such bound (infinity)."""
        if not self.loop.closed:
            return math.inf
        alone = sum(p.weight * a for p, a in zip(self.prompts, pt.alone_s, strict=True))
        away = pt.wait_mean_s + alone + self.loop.offset_s + self.loop.think_time_s
        return max(pt.batch + pt.rate_rps * away, 1.0)

    def feedback(self, pt: LoadPoint) -> float:
        """Loop gain of the decode batch, lambda E[n] dTPOT/db at a fixed rate (it reaches 1 at saturation).

        A batch above its mean slows every step, which keeps sequences longer, which raises the batch: a
        disturbance of TPOT comes back multiplied by 1 / (1 - gain).
        """
        if not self.decodes:
            return 0.0
        h = max(0.5, 0.01 * pt.batch)
        lo, hi = max(pt.batch - h, 0.0), pt.batch + h
        if not self.prompts:
            slope = self.decode_slope(pt.batch + 1)
        else:
            slope = (self._tpot_at(hi, pt) - self._tpot_at(lo, pt)) / (hi - lo)
        if math.isnan(slope):  # both sides past the prefill's saturation: the gain is at its cap
            return 0.95
        return min(max(pt.rate_rps * self.decode_steps_mean * slope, 0.0), 0.95)

    def _tpot_at(self, b: float, pt: LoadPoint) -> float:
        t0, _, alpha, _, d, m = self._terms(b, pt.last_steps)
        rho = min(pt.rate_rps * (alpha * self.prompt_moments[0] + d), 1.0)
        return self._steady_tpot(pt.rate_rps, rho, t0, m)

    def _steady_tpot(self, rate: float, rho: float, t0: float, m: float) -> float:
        """TPOT as a time-random life meets the steps: 1 / the tokens a decoding sequence gets per second, in the
        prefill steps (lambda m, none apart) and in the decode-only share ((1 - rho) / T0)."""
        tokens_per_s = rate * self._tokens_per_prefill_step(m) + (1 - rho) / t0
        # every step carries prefill (rho = 1) and none of them gives the decodes a token (prefill apart): no end
        return 1 / tokens_per_s if tokens_per_s > 0 else math.inf


def _others_of(users: float) -> float:
    """(N - 1) / N: the share of a closed loop's arrivals that are other users' (the arrival theorem); 1 open."""
    return 1 - 1 / users if math.isfinite(users) else 1.0


class _Damped:
    """The fixed-point passes over (e, s), each step a weight w of the way from the iterate x to the map's g(x): the
    secant's along the last step, w / (1 - r'.r / r.r) from the residuals r = g(x) - x before and r' after it (the
    step that would zero r' if the map were linear along r), starting at 1 and never growing: where the map jumps
    (a closed loop's prefill queue at its edge: a last step full or not) a growing weight leapt back across the jump.

    Half-and-half (the weight every pass had) converges only where the map's slope is above -3: near the prefill
    queue's edge a closed loop's queue rate swings with the prefill step time, the slope passes -3, and the iterate
    cycled through all 12 passes at every rate the bisection tried (1 user of 50-token prompts and 10-token answers
    on an H100: 27,544 passes, 69 s)."""

    def __init__(self) -> None:
        self.weight, self.residual, self.scales = 1.0, (), ()

    def __call__(self, old: Lasts | None, new: Lasts) -> tuple[Lasts, bool]:
        """The next iterate and whether it has settled: every e within the tolerance of the fixed point and every s
        within it relative, by the map's own move (g(x) - x) or, once a secant has measured the slope, by the step
        it takes (w (g(x) - x): along a line of slope -G the fixed point lies 1 / (1 + G) of the residual away)."""
        if old is None:
            return new, False
        if _within(old, new, 1.0):
            return new, True
        # the residual in units fixed at the first pass (each s relative to its first value), so that the secant
        # compares like with like from pass to pass
        self.scales = self.scales or tuple(max(a[1], b[1], 1e-12) for a, b in zip(old, new, strict=True))
        residual = tuple(
            x for a, b, scale in zip(old, new, self.scales, strict=True) for x in (b[0] - a[0], (b[1] - a[1]) / scale)
        )
        measured = bool(self.residual)
        if measured:
            ratio = sum(x * y for x, y in zip(residual, self.residual, strict=True)) / sum(y * y for y in self.residual)
            self.weight = max(self.weight / max(1 - ratio, 1.0), MIN_WEIGHT)  # (a residual that kept its sign: kept)
        self.residual, w = residual, self.weight
        step = tuple((a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1])) for a, b in zip(old, new, strict=True))
        # where the map jumps (a closed loop's prefill queue at its edge: a step full or not) g(x) - x never
        # shrinks, and the shrinking secant steps close in on the jump instead: settled once they are that short
        return step, measured and _within(old, new, w)


def _within(old: Lasts, new: Lasts, weight: float) -> bool:
    """Whether weight x (new - old) is within the tolerance on every e, and relative to it on every s."""
    return all(
        weight * abs(a[0] - b[0]) <= TAIL_TOLERANCE
        and weight * abs(a[1] - b[1]) <= TAIL_TOLERANCE * max(a[1], b[1], 1e-12)
        for a, b in zip(old, new, strict=True)
    )


def _affine_moments(alpha: float, d: float, m1: float, m2: float, m3: float) -> Moments:
    """Moments of S = alpha P' + d from the prompt's raw moments E[P'], E[P'^2], E[P'^3]."""
    mean = alpha * m1 + d
    raw2 = alpha**2 * m2 + 2 * alpha * d * m1 + d**2
    raw3 = alpha**3 * m3 + 3 * alpha**2 * d * m2 + 3 * alpha * d**2 * m1 + d**3
    return Moments.from_raw(mean, raw2, raw3)


def decode_context(traffic: Traffic) -> float:
    """Mean cached context of a decoding sequence: p0 + E[P'] + (E[n^2] + E[n]) / (2 E[n]).

    Step j of a request's n decode steps attends over its prompt + j tokens; averaged over the time every
    request spends decoding, longer answers weigh more (length-biased), hence E[n^2] / E[n]. For fixed
    lengths this is P + O / 2, estimate's mean decode context. A trace's lengths come in pairs, so its prompt term
    is E[n P'] / E[n]: the prompts of long answers, which are the ones decoding most of the time.
    """
    o1, o2 = traffic.output.moment(1), traffic.output.moment(2)
    n1, n2 = o1 - 1, o2 - 2 * o1 + 1
    progress = (n2 + n1) / (2 * n1) if n1 > 0 else 1.0
    prompt = traffic.prompt.mean
    if traffic.pairs and n1 > 0:  # a trace: each request's prompt weighed by its own decode steps, E[n P'] / E[n]
        prompt = sum((o - 1) * p for p, o in traffic.pairs) / (n1 * len(traffic.pairs))
    return traffic.cached_prefix_tokens + prompt + progress


def held_kv_tokens(kv_beside: Callable[[float], float], per_sequence: float) -> float:
    """KV tokens a replica holds beside the workspace of the batch it then holds: the most sequences b whose KV
    (b x `per_sequence` tokens) fits beside their own logits and activations, kv_beside(b) (which falls as b grows).
    Short requests need this fixed point: at 2 tokens a sequence the logits of the batch the weights alone leave
    room for would take more memory than its KV."""
    lo, hi = 1.0, max(kv_beside(1.0) / per_sequence, 1.0)
    if kv_beside(hi) >= hi * per_sequence:
        return kv_beside(hi)
    while hi - lo > 0.5:  # whole sequences: kv_beside rounds b
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kv_beside(mid) >= mid * per_sequence else (lo, mid)
    return kv_beside(lo)


def build_replica(
    model: ModelSpec, deployment: Deployment, traffic: Traffic, chunk: int, scenario: Scenario,
    role: Role = "both", transfer_s: float = 0.0, max_running: int | None = None, scheduler_steps: int = 1,
    client_side: bool = True, lookahead: bool = False, prefill_apart: bool = False,
) -> Replica:  # fmt: skip
    """A Replica of `deployment` serving `traffic` with prefill budget `chunk` (and the engine's running cap,
    multi-step and overlap scheduling, prefill apart or beside the decodes) under one scenario. Overlap scheduling
    needs one pipeline stage: SGLang's server_args sets disable_overlap_schedule when pp_size > 1 ("Pipeline
    parallelism is incompatible with overlap schedule"), TensorRT-LLM's PyExecutor runs _executor_loop_pp there,
    and vLLM 0.14 turns async scheduling off with pipeline stages (its later support "with constraints", PR 32359,
    is not priced)."""
    engine = deployment.engine.per_window(scheduler_steps)  # multi-step: the host's work once per k steps
    if engine is not deployment.engine:
        deployment = replace(deployment, engine=engine)
    prompt, output = max(round(traffic.prompt_mean_tokens), 1), max(round(traffic.output.mean), 1)
    per_sequence = max(model.attended_tokens(prompt + output), 1.0)
    kv = held_kv_tokens(lambda b: replica_kv_tokens(model, deployment, b, prompt, output), per_sequence)
    steps = Steps(model, deployment, scenario, decode_context(traffic), batch_limit=1.0)
    replica = Replica(steps, traffic, chunk, kv, role, transfer_s, max_running, client_side, prefill_apart)
    replica.scheduler_steps, replica.lookahead = scheduler_steps, lookahead and deployment.layout.pp == 1
    limit = 0.0 if replica.rate_driven else replica.load_limit()
    steps.batch_limit = min(limit, replica.saturation_batch, 1e7 / per_sequence) + 2.0
    replica.stable_batch = replica.queue_stable_batch()  # the curves now cover every batch it may try
    replica.cap_batch = replica.time_cap_batch()
    return replica
