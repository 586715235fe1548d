"""`tokcost plan --explain`: the serving model in words, then the top configuration's numbers plugged in.

Every value comes from the objects the plan computed (the replica's step curves, its steady state, its
capacity and fleet), never from a second formula.
"""

from __future__ import annotations

import math

from tokcost import fmt
from tokcost.engine.roofline import PassCost
from tokcost.serving.capacity import users_capacity
from tokcost.serving.fleet import busy_share, cost_shares, lone_split
from tokcost.serving.latency import prefill_gap_share
from tokcost.serving.loop import others_decoding
from tokcost.serving.replica import LoadPoint, Replica, busy_idle_cycle
from tokcost.serving.rounds import Round, held, round_prompt
from tokcost.serving.search import Plan, Row, row_label
from tokcost.serving.ttft import (
    final_step_extra,
    lookahead_step,
    others_share,
    prefill_step_count_share,
    step_arrivals,
    step_locked_backlog,
    step_locked_per_step,
    time_random_backlog,
    ttft_moments,
)

SERVING_MODEL = [
    "Each step of a continuous-batching server (vLLM, SGLang, TensorRT-LLM with chunked prefill) runs one "
    "token for each of the b sequences in decode plus up to C prompt tokens (the chunk, the engine's default "
    "budget unless --chunk) from a FCFS prefill queue, in one pass priced by the engine's kernels (weights read "
    "once, KV of every sequence, all-reduces); at most the engine's cap of sequences run at once.",
    "Decode, Little's law: b = lambda x E[n] x TPOT, n = O - 1 decode steps. A decoding sequence sees lambda m "
    "prefill steps and (1 - rho) / T0 decode-only steps per second: TPOT = 1 / (lambda m + (1 - rho) / T0). "
    "Engines that run prefill in steps of their own (vLLM before V1 with chunked prefill off, SGLang without mixed "
    "chunks) give the decoders no token in those steps: TPOT = T0 / (1 - rho), prefill priced without the batch.",
    "Prefill load lambda x P' tokens/s: rho = lambda E[S], S a prompt's full chunks plus its part of the step "
    "that runs its last chunk, shared with the prompts that joined it (P' Tc / C when full); saturation when "
    "every step is full of prefill (rho -> 1, "
    "b -> E[n] C / E[P']) or at the running cap: the engine's, or the sequences the KV cache holds whole (KV "
    "memory), a request past it waiting for a slot (Erlang C).",
    "TTFT = the engine's per-request cost (as a client times it) + the wait for a running slot (Erlang C at the "
    "cap; a closed loop past its limit: extra users / rate) + the step in progress at arrival (open loop: half a "
    "decode step on average; closed loop: the whole step less the client's round trip, a backlog's prefill step "
    "whole, shared with the other users who finished with it, lambda w T (1 - 1/N) a step, and a full step "
    "later where those ahead of it, half of them, leave its prompt no room) + the M/G/1 wait on packed "
    "prefill work behind a backlog (chance lambda E[P'] Tc / C: a step takes every waiting prompt up to C tokens; "
    "Pollaczek-Khinchine; a closed loop's queue sees arrivals per step, lambda T / Tp while busy) + own chunks + "
    "the tokens packed beside it in its last step. Fixed lengths in a closed loop: a stated share of the users "
    "comes back in lock-step groups (each waiting out the group before it; published runs lock partly), and all "
    "of them locked is the other end of the range, shown as lock-step; with prefill apart and no think time all "
    "of them come back as one round, priced step by step (below).",
    "TPOT per request = T0 + kappa x prefill time in its lifetime / n, kappa = 1 - T0/Tp (1 with prefill apart): "
    "a compound Poisson sum (variance "
    "lambda L E[S^2]) plus the batch's swing (Poisson; binomial for N users), amplified by the batch's feedback "
    "1 / (1 - gain); an open loop's request also starts decoding behind the prompts that queued while its own "
    "waited and ran (a prefill busy period's rest, chance rho, mean (E[W] + E[S]) / (1 - rho)), whose share D it "
    "loses is in Little's TPOT too; a shifted gamma with the same mean, variance and skew, never below a step "
    "alone. ITL pools "
    "every gap between tokens: the share of steps carrying prefill at their length, the rest at T0; with prefill "
    "apart, a gap after a decode step that saw an arrival (1 - exp(-lambda T0) of them) holds the whole prefill run.",
    "Goodput = the largest rate meeting every SLO (bisection on the batch); replicas = ceil(load x (1 + headroom) "
    "/ goodput), in users for a closed loop; plans rank by the fleet's $/hour; $/1M tokens spreads it over every "
    "token, and $/1M input and output split it by the prefill and decode shares of busy time. Disaggregated: "
    "prefill and decode pools sized apart, KV moved over the link (+ transfer / n on TPOT).",
]


def _pass(name: str, cost: PassCost) -> str:
    parts = [f"{c.name} {fmt.ms(c.seconds)} ({c.bound})" for c in cost.components if c.seconds]
    factor = cost.pipeline_factor
    if cost.gap_s:  # the GPU's idle time between kernels (their count x the engine's gap)
        parts.append(f"gaps between kernels {fmt.ms(cost.gap_s * factor)}")
    if cost.hidden_s:  # communication overlapped with the kernels
        parts.append(f"- {fmt.ms(cost.hidden_pass_s)} of the communication hidden behind the kernels")
    if cost.launch_bound:
        parts.append(f"(the host's kernel launches, {fmt.ms(cost.launch_s * factor)}, set the stage time)")
    if cost.overhead_s:
        parts.append(f"overhead {fmt.ms(cost.overhead_s)}")
    return f"{name} = {fmt.ms(cost.seconds)}: " + ", ".join(parts)


def explain_plan(plan: Plan) -> list[tuple[str, list[str]]]:
    """(heading, lines) for the serving model and the top configuration that meets the SLOs."""
    sections = [("How plan models serving", SERVING_MODEL)]
    meeting = [r for r in plan.rows if r.expected.meets_slo and r.replica is not None]
    if not meeting:
        return sections + [("Top configuration", ["no configuration meets the SLOs; see the failures above"])]
    if meeting[0].mode == "disaggregated":
        sections.append(_disaggregated_section(meeting[0]))
    aggregated = next((r for r in meeting if r.mode == "aggregated"), None)
    return sections + (_row_sections(plan, aggregated) if aggregated else [])


def _disaggregated_section(row: Row) -> tuple[str, list[str]]:
    x, decode = row.expected, row.replica
    assert decode is not None and row.prefill_layout is not None
    return (
        f"Top configuration: {row_label(row)}, chunk {row.chunk:,}, expected",
        [
            f"prefill pool: {x.prefill_replicas} x {row.prefill_layout.label}, sized for the TTFT SLOs; decode "
            f"pool: {x.replicas} x {row.deployment.layout.label}, sized for the TPOT SLOs; {x.gpus} GPUs",
            f"KV transfer per request = {fmt.ms(decode.transfer_s)}, spread over its decode steps (+ transfer / n "
            "on TPOT)",
            "TTFT p50/p90/p99 = " + _triple(x.ttft_s) + "; TPOT p50/p90/p99 = " + _triple(x.tpot_s),
            "the aggregated arithmetic below is the best aggregated configuration's",
        ],
    )


PAIRED = "E[n P'] / E[n] (each of the trace's prompts weighed by its own answer's decode steps)"


def _row_sections(plan: Plan, row: Row) -> list[tuple[str, list[str]]]:
    r, x = row.replica, row.expected
    assert r is not None and x.point is not None and x.capacity is not None
    pt, cap = x.point, x.capacity
    t = plan.traffic
    load = f"{t.rate_rps:g} req/s" if t.rate_rps is not None else fmt.counted(t.concurrency or 0, "user")
    head = f"Top configuration: {row_label(row)}, chunk {row.chunk:,}, expected ({load})"
    prompt_term = PAIRED if t.pairs else "E[P']"
    steps = [
        f"decode context c = p0 + {prompt_term} + (E[n^2] + E[n]) / (2 E[n]) = {r.steps.decode_context:,.0f} tokens",
        _pass(f"decode-only step at batch b + 1 = {pt.batch + 1:,.1f}", r.steps.pass_cost(pt.batch + 1, ())),
        f"T0 = the decode-only step a sequence sees, averaged over the Poisson(b) others it shares a step with = "
        f"{fmt.ms(pt.decode_step_s)} (the step at b + 1 where the step is a line in the batch)",
    ]
    if r.prompts:
        beside = r.prefill_batch(pt.batch)
        steps.append(_pass(f"Tc (chunk of {r.chunk:,} prompt tokens + {beside:,.1f} decodes)",
                           r.steps.pass_cost(beside, r.packed)))  # fmt: skip
        if r.prefill_apart:
            steps.append(
                "prefill apart (the engine's scheduler): a step that runs prompt tokens runs nothing else, "
                "so the decoding sequences get no token from it and wait it out whole"
            )
        alpha_us = pt.chunk_step_s / r.chunk * 1e6
        steps.append(f"alpha = Tc / C = {fmt.ms(pt.chunk_step_s)} / {r.chunk:,} = {alpha_us:.2f} us per prompt "
                     f"token; a lone median prompt costs A = {fmt.ms(pt.alone_s[len(pt.alone_s) // 2])}")  # fmt: skip
    n = r.decode_steps_mean
    fixed = [
        f"per replica: lambda = {pt.rate_rps:.3f} req/s, E[n] = {n:,.0f}, E[P'] = {r.prompt_moments[0]:,.0f}",
        *_loop_lines(plan, row, r),
        *_service_lines(r, pt),
        f"rho = lambda E[S] = {pt.rate_rps:.3f} x {fmt.ms(pt.service.mean)} = {pt.rho:.3f}",
        _tpot_line(r, pt),
        f"b = lambda E[n] TPOT = {pt.rate_rps:.3f} x {n:,.0f} x {fmt.ms(pt.tpot_mean_s)} = "
        f"{pt.rate_rps * n * pt.tpot_mean_s:,.1f} sequences (the state solved at b = {pt.batch:,.1f})",
    ]
    cv = math.sqrt(pt.service.var) / pt.service.mean if pt.service.mean else 0.0
    queue = [
        f"E[S] = {fmt.ms(pt.service.mean)}, CV {cv:.2f}; arrivals as the queue sees them lambda_q = "
        f"{_queue_rate_text(r, pt)}; {_packed_work_text(r, pt)}, at P(wait) = u = lambda_q alpha "
        f"E[P'] = {pt.queue_rho:.3f}: E[W] = lambda_q E[w^2] / (2 (1 - u)) = {fmt.ms(pt.wait_mean_s)}",
        f"last-step extra up to {fmt.ms(final_step_extra(r, pt, r.prompts[len(r.prompts) // 2]))}; the engine's "
        f"per-request cost on TTFT (client-side) {fmt.ms(r.overhead_s)}" if r.prompts else "no prefill here",
        *_timed_queue_lines(r, pt),
        *_admission_lines(r, pt),
        *_lookahead_lines(r, pt),
        "TTFT p50/p90/p99 = " + _triple(x.ttft_s) + "; TPOT p50/p90/p99 = " + _triple(x.tpot_s)
        + "; ITL p50/p90/p99 = " + _triple(x.itl_s) + f" (gaps that hold prefill: {prefill_gap_share(r, pt):.2%} of "
        "all, above ITL's p99 while under 1%; TPOT is each request's mean gap, so its tail can pass ITL's p99)",
        _feedback_line(r, pt),
    ]  # fmt: skip
    if pt.round is not None:  # whole lock-step rounds: the round's arithmetic in place of the queue's
        fixed, queue = _round_lines(plan, row, r, pt.round), []
    running = f"{r.max_running:,} ({row.choice.max_running_source})" if r.max_running and row.choice else "none"
    limits = r.load_limits() if not r.rate_driven else {}
    saturation = (f"saturation batch E[n] C / E[P'] = {r.saturation_batch:,.1f}" if math.isfinite(r.saturation_batch)
                  else "no saturation batch from packing (prefill runs in steps of its own: the queue's rho -> 1 "
                  "stops the load)")  # fmt: skip
    share = (
        f"x the decoding share of a slot's time, E[n] TPOT / (E[n] TPOT + E[S]) = {r.cap_share():.3f}"
        if r.cap_batch is not None
        else f"x the decoding share of a slot's steps {r.decoding_share():.3f}"
    )
    slots = r.kv_slots()
    held = fmt.counted(int(slots), "sequence") if math.isfinite(slots) else "unbounded sequences"
    kv = (f"KV limit ({held} the cache holds whole, {share}) = "
          f"{limits.get('KV memory', math.inf):,.1f}")  # fmt: skip
    cap_note = f" ({share}: {limits['cap']:,.1f})" if math.isfinite(limits.get("cap", math.inf)) else ""
    limit = [
        f"{saturation}; {kv}; running cap {running}{cap_note}",
        f"saturation = {cap.saturation_rps:.3f} req/s per replica; goodput = {cap.max_rate_rps:.3f} req/s "
        f"(at b = {cap.load:,.1f}); binding: {cap.binding}",
    ]
    if pt.round is not None:
        return [(head, steps), ("Lock-step round (prefill apart, fixed lengths, no think time)", fixed),
                ("Saturation and goodput", limit), ("Fleet and cost", _fleet_lines(plan, row, r))]  # fmt: skip
    return [
        (head, steps),
        ("Fixed point (Little's law)", fixed),
        ("Queue (M/G/1 on prefill work)", queue),
        ("Saturation and goodput", limit),
        ("Fleet and cost", _fleet_lines(plan, row, r)),
    ]


def _round_lines(plan: Plan, row: Row, r: Replica, found: Round) -> list[str]:
    """A loop in whole rounds (rounds.py): every user's prompt before any decode, then the decodes together."""
    t, x = plan.traffic, row.expected
    n, prompt = r.decode_steps_mean, round_prompt(r)
    users = found.users
    cycle = (
        f"{fmt.ms(t.client_rtt_s)} + {fmt.ms(r.request_cost_s)} + {fmt.ms(found.prefill_s)} + {fmt.ms(found.decode_s)}"
    )
    rate = f"rate X = N / (RTT + c + sum L + D) = {users:,.1f} / ({cycle}) = {found.rate_rps:.3f} req/s per replica"
    if users > held(r):
        rate = (
            f"more users than a round holds (K = {held(r):,.0f}): the extra users wait for a slot and the groups "
            "split as slots free (a few left over get a prefill step of their own; overlap scheduling staggers "
            f"them), so the figures are the simulator's steady state (rounds.queued): X = {found.rate_rps:.3f} "
            f"req/s per replica, each request waiting {fmt.ms(found.wait_s)} on average past a lone round's TTFT, "
            "the step terms below those of a round of K"
        )
    return [
        f"prefill runs apart and waiting prompts go first, so all N = {users:,.1f} users' prompts run before any "
        "decode: all of them start decoding in one step, finish in one step and come back together (rounds.py)"
        + (
            ""
            if plan.traffic.prompt.kind == "fixed"
            else "; prompts that vary: P' below is their mean, and the figures "
            "pool rounds of prompts drawn from their law, each priced step by step"
        ),
        f"prefill: k = ceil(N P' / C) = ceil({users:,.1f} x {prompt:,} / {r.chunk:,}) = {found.prefill_steps:,} steps "
        f"of up to {r.chunk:,} prompt tokens, sum L = {fmt.ms(found.prefill_s)}; request m's first token ends step "
        f"ceil(m P' / C): TTFT_m = c + L_1 + ... + L_j, c = {fmt.ms(r.overhead_s)}",
        f"decode: n = {n:,.0f} steps at batch N, D = n x the step at the mean context = {fmt.ms(found.decode_s)}; "
        "TPOT_m = (the prefill steps after its own + D) / n",
        rate,
        f"TTFT p50/p90/p99 = {_triple(x.ttft_s)}; TPOT p50/p90/p99 = {_triple(x.tpot_s)}; ITL p50/p90/p99 = "
        f"{_triple(x.itl_s)} (each request's first gap holds the prefill steps after its own: {1 / n:.2%} of the "
        "gaps)",
    ]


def _service_lines(r: Replica, pt: LoadPoint) -> list[str]:
    """A request's prefill work S (replica._terms): its full chunks alone, then its share of its last chunk's step."""
    if not r.prompts:
        return []
    k = len(r.prompts) // 2
    prompt, (e, s), alone = r.prompts[k], pt.last_steps[k], pt.alone_s[k]
    t0, tp = fmt.ms(pt.decode_step_s), fmt.ms(pt.prefill_step_s)
    kappa = (f"kappa = 1 - T0 / Tp = 1 - {t0} / {tp} = {pt.decode_share:.3f}" if not r.prefill_apart
             else "kappa = 1 (prefill apart: the decoders wait each prefill step out whole)")  # fmt: skip
    return [
        f"S = a prompt's full chunks, run alone, + s, its share of the step of its last chunk (shared with those who "
        f"join it); the median prompt ({prompt.tokens:,} tokens): {prompt.chunks - 1} full chunk(s), share e = "
        f"{e:.3f} of its last step, s = {fmt.ms(s)}; alone (nothing queued) it costs A = {fmt.ms(alone)}",
        f"over the prompt grid: E[S] = {fmt.ms(pt.service.mean)}, m = E[chunks - 1 + e] = {pt.steps_per_request:.3f} "
        f"prefill steps per request, Tp = E[S] / m = {fmt.ms(pt.prefill_step_s)}; {kappa}",
    ]  # fmt: skip


def _feedback_line(r: Replica, pt: LoadPoint) -> str:
    """The batch's loop gain (replica.feedback) from its slope."""
    gain, flow = r.feedback(pt), pt.rate_rps * r.decode_steps_mean
    if gain <= 0 or flow <= 0:
        return f"feedback gain {gain:.2f} (no decode batch to feed back)"
    if gain >= 0.95:  # replica.feedback's cap: the slope past it is not what the gain says
        return "feedback gain = lambda E[n] dTPOT/db, capped at 0.95 (the loop's edge, near saturation)"
    return (
        f"feedback gain = lambda E[n] dTPOT/db = {pt.rate_rps:.3f} x {r.decode_steps_mean:,.0f} x "
        f"{gain / flow * 1e6:.3g} us per sequence = {gain:.2f}: a TPOT disturbance returns x 1 / (1 - gain)"
    )


def _tpot_line(r: Replica, pt: LoadPoint) -> str:
    """Little's TPOT: prefill steps give every decoder a token too, or none when prefill runs apart."""
    if r.prefill_apart:
        line = (
            f"TPOT = T0 / (1 - rho) = {fmt.ms(pt.decode_step_s)} / {1 - pt.rho:.3f} = "
            f"{fmt.ms(pt.tpot_steady_s or pt.tpot_mean_s)} (prefill steps apart give no token)"
        )
        return line if pt.backlog_busy_s <= 0 else line + _backlog_text(r, pt)
    line = (
        f"TPOT = 1 / (lambda m + (1 - rho) / T0) = 1 / ({pt.rate_rps:.3f} x {pt.steps_per_request:.3f} + "
        f"{1 - pt.rho:.3f} / {fmt.ms(pt.decode_step_s)}) = {fmt.ms(pt.tpot_steady_s or pt.tpot_mean_s)}"
    )
    return line if pt.backlog_busy_s <= 0 else line + _backlog_text(r, pt)


def _backlog_text(r: Replica, pt: LoadPoint) -> str:
    """The life D the prefill backlog a request decodes behind adds (replica.held_backlog), and Little's TPOT."""
    life, n = r.held_life(pt.held_backlog), r.decode_steps_mean
    room = "" if pt.backlog_room >= 1 else (
        f" x {pt.backlog_room:.3f} (the share of the lambda E[T] prompts behind it that the running cap has slots "
        "for)")  # fmt: skip
    lose = "all of it (no token in a prefill step)" if pt.prefill_apart else (
        f"1 - TPOT / Tp = {pt.backlog_keep:.3f} of it, at most its n steps x Tp = "
        f"{fmt.ms(pt.prefill_step_s)}")  # fmt: skip
    return (
        f"; + D / E[n]: a request starts decoding behind the prompts that queued while its own waited and ran, "
        f"inside a prefill busy period with chance rho = {pt.rho:.3f}, whose rest lasts (E[W] + E[S]) / (1 - rho)"
        f"{room} = {fmt.ms(pt.backlog_busy_s)} on average (a gamma of the wait's shape, {pt.wait_shape:.2f}), and it "
        f"loses {lose}{_clump_text(r, pt)}: D = {fmt.ms(life)}, so "
        f"TPOT = {fmt.ms(pt.tpot_steady_s)} + {fmt.ms(life)} / {n:,.0f} = {fmt.ms(pt.tpot_mean_s)}"
    )


def _clump_text(r: Replica, pt: LoadPoint) -> str:
    """The clump a request behind a backlog then decodes beside (replica.clumped_companions) and what it adds."""
    if pt.clump <= 0:
        return ""
    life, slope = r.decode_steps_mean * pt.tpot_steady_s, r.decode_slope(pt.batch + 1)
    slots = r.free_slots(pt.batch)
    name, cap = (", free slots", f", {slots:,.1f}") if math.isfinite(slots) else ("", "")
    return (
        f"; then it decodes beside the others its busy period let out beyond Poisson(b), x = min(2 lambda E[T] "
        f"min(1, C / L), L (1 - rho) / E[S]{name}) = min(2 x {pt.rate_rps:.3f} x {fmt.ms(pt.clump_sojourn_s)} x "
        f"min(1, {fmt.ms(busy_idle_cycle(pt.service.mean, pt.rho))} / {fmt.ms(life)}), {fmt.ms(life)} x "
        f"{1 - pt.rho:.3f} / {fmt.ms(pt.service.mean)}{cap}) = {pt.clump:.2f} (E[T] = E[W] + E[S], as far as the "
        "running cap's free slots reach; "
        f"C = E[S] / (rho (1 - rho)), a busy-idle cycle; L = E[n] TPOT), each slowing its decode-only steps by "
        f"dT0/db = {fmt.ms(slope)}: TPOT with T0 + {pt.clump:.2f} x {fmt.ms(slope)} less TPOT, over rho, is "
        f"{fmt.ms(pt.clump_step_s)} more per decode step of a request behind a backlog"
    )


def _lookahead_lines(r: Replica, pt: LoadPoint) -> list[str]:
    """Overlap scheduling's term of TTFT: the step after the one an arrival finds, chosen before it came."""
    if not r.lookahead or not r.prompts:
        return []
    n, p_dec = prefill_step_count_share(r, pt), others_decoding(pt.batch, r.users_estimate(pt))
    return [f"overlap scheduling: an arrival that finds a step running also waits the next one, chosen before it "
            f"came: a prefill step with the share n of steps (by count) that carry prefill, n = (f / Tp) / (f / Tp + "
            f"(1 - f) P(others decode) / T0) = ({pt.prefill_share:.4f} / {fmt.ms(pt.prefill_step_s)}) / "
            f"({pt.prefill_share:.4f} / {fmt.ms(pt.prefill_step_s)} + {1 - pt.prefill_share:.4f} x {p_dec:.4f} / "
            f"{fmt.ms(pt.decode_step_s)}); (1 - n) T0 + n Tp = {1 - n:.4f} x {fmt.ms(pt.decode_step_s)} + "
            f"{n:.4f} x {fmt.ms(pt.prefill_step_s)} = {fmt.ms(lookahead_step(r, pt))}"]  # fmt: skip


def _loop_lines(plan: Plan, row: Row, r: Replica) -> list[str]:
    """The closed loop's population (Little on a user's cycle) and how its arrivals meet the steps."""
    t, x = plan.traffic, row.expected
    if not t.concurrency or x.point is None or x.replicas is None:
        return []
    pt = x.point
    users = t.concurrency / x.replicas
    ttft = ttft_moments(r, pt).mean
    lines = [f"users N = lambda (E[TTFT] + E[n] TPOT + RTT + Z) = {pt.rate_rps:.3f} x ({fmt.ms(ttft)} + "
             f"{r.decode_steps_mean:,.0f} x {fmt.ms(pt.tpot_mean_s)} + {fmt.ms(t.client_rtt_s)} + "
             f"{t.think_time_s:g} s) = {users:,.1f} per replica"]  # fmt: skip
    step = pt.tpot_mean_s
    if r.loop.lockable and r.loop.step_share(step) > 0.5:
        lines.append(f"fixed lengths, no think time: users come back partly in lock-step groups, each waiting out the "
                     f"group before it; the primary figures price {r.loop.locked:.0%} of them so (a stated share: "
                     "published closed loops measure between the ends), the lock-step TTFT all of them")  # fmt: skip
    if r.loop.step_share(step) > 0.5:
        lines.append(f"no think time: each request lands {fmt.ms(r.loop.offset_s)} after a step boundary and waits "
                     "out that step; the prefill queue sees arrivals per step, not per second: lambda w T (1 - 1/N) = "
                     f"{pt.rate_rps:.3f} x {r.loop.step_share(step):.3f} x {fmt.ms(step)} x {others_share(r, pt):.4f} "
                     f"= {step_locked_per_step(r, pt):.3f} other users a step finish together and share the next (a "
                     "prompt that those ahead of it leave no room runs a full step later)")  # fmt: skip
    if r.loop.step_share(step) > 0 and r.prompts:
        lines.append(_step_queue_text(r, pt))
    return lines


def _step_queue_text(r: Replica, pt: LoadPoint) -> str:
    """A step-locked arrival's backlog as a queue of steps (ttft.step_locked_backlog)."""
    count = step_arrivals(pt)
    p, wait_s, _ = step_locked_backlog(r, pt)
    rate, alpha = pt.queue_rate_rps, pt.chunk_step_s / r.chunk
    return (f"step-locked arrivals queue in steps: lambda_q Tp = {rate:.3f} x {fmt.ms(pt.prefill_step_s)} = "
            f"{count:.3f} prompts ({count * r.prompt_moments[0]:,.0f} tokens) come a step and each step takes up to "
            f"{r.chunk:,}: P(the step in progress leaves some over) = {p:.3f} (Spitzer's identity); then the full "
            f"step in progress, the {wait_s / alpha if alpha > 0 else 0.0:,.0f} tokens left over on average x alpha "
            f"{alpha * 1e6:.2f} us = {fmt.ms(wait_s)}, and half of the {step_locked_per_step(r, pt):.3f} users who "
            "came back with it wait ahead of it")  # fmt: skip


def _timed_queue_lines(r: Replica, pt: LoadPoint) -> list[str]:
    """What an arrival at a uniform moment waits behind, as a queue of steps (ttft.time_random_backlog)."""
    if not r.prompts or r.loop.step_share(pt.tpot_mean_s) >= 1 or pt.queue_rho <= 0:
        return []
    share, drain_s, _, found = time_random_backlog(r, pt)
    alpha, tc = pt.chunk_step_s / r.chunk, pt.chunk_step_s
    left = drain_s / alpha if alpha > 0 else 0.0
    longest = max(seconds for _, seconds in found)
    return [
        f"an arrival at a uniform moment lands in a prefill step (share of time {pt.prefill_share:.3f}, found by its "
        f"length, {fmt.ms(longest)} at most) and waits out its rest; with chance {share:.3f} that step is a full "
        f"chunk ({fmt.ms(tc)}) that leaves {left:,.0f} tokens over on average (= {fmt.ms(drain_s)} at alpha "
        f"{alpha * 1e6:.2f} us), and those that came before it in the step wait ahead of it too (a queue of steps, "
        "not M/G/1's P(wait) above)"
    ]


def _packed_work_text(r: Replica, pt: LoadPoint) -> str:
    """A queued prompt's packed work w, its first two moments (Replica.work_tokens) and the numbers that give them."""
    alpha = pt.chunk_step_s / r.chunk
    packed = r.packed_moments(alpha)  # the moments the wait is computed from
    m2, m3, m4 = r.prompt_powers[1:4]
    k, t = r.work_slope(alpha), (m2 / r.prompt_moments[0] if r.prompt_moments[0] else 0.0)
    return (
        f"a queued prompt is drained packed, w = alpha ((1 - k t) P' + k P'^2): each chunk attends over the ones "
        f"before it (prefix slope c1 = {r.prefix_slope() * 1e9:.4g} ns a token per token of prefix, k = c1 / (2 "
        f"alpha) = {k:.4g}, t = E[P'^2] / E[P'] = {t:,.0f}; E[P'^2], E[P'^3], E[P'^4] = {m2:.6g}, {m3:.6g}, "
        f"{m4:.6g}): E[w] = alpha E[P'] = {fmt.ms(packed.mean)}, E[w^2] = alpha^2 ((1 - k t)^2 E[P'^2] + 2 (1 - k t) "
        f"k E[P'^3] + k^2 E[P'^4]) = {packed.raw2 * 1e6:,.4g} ms^2"
    )


def _queue_rate_text(r: Replica, pt: LoadPoint) -> str:
    """lambda_q: an open loop's rate; a closed loop's slowed by its busy periods (loop.py) and cut to the other users'
    (the arrival theorem: a prompt never queues behind its own user's)."""
    if not r.loop.closed or pt.rate_rps <= 0 or pt.queue_others <= 0:
        return f"{pt.queue_rate_rps:.3f}/s"
    slowed = pt.queue_rate_rps / (pt.rate_rps * pt.queue_others)
    return (
        f"lambda x {slowed:.3f} (busy periods slow the users' finishes, loop.py) x (N - 1) / N "
        f"{pt.queue_others:.4f} (the other users') = {pt.queue_rate_rps:.3f}/s"
    )


def _admission_lines(r: Replica, pt: LoadPoint) -> list[str]:
    if pt.admission_wait_s > 0:
        line = f"past the load limit: each request waits {fmt.ms(pt.admission_wait_s)} for a running slot"
        if r.loop.lockable:
            return [line + " (fixed lengths finish in lock-step: a constant)"]
        ahead = pt.admission_wait_s * pt.rate_rps
        return [
            line + f", the {ahead:,.1f} users ahead admitted one per finish at {pt.rate_rps:.3f}/s: Erlang("
            f"{ahead:,.1f}), variance {ahead:,.1f} / {pt.rate_rps:.3f}^2, in every TTFT branch's gamma"
        ]
    if pt.admission_p > 1e-3:
        return [f"every running slot taken (Erlang C): P = {pt.admission_p:.3f}, then a mean wait of "
                f"{fmt.ms(pt.admission_mean_s)}"]  # fmt: skip
    return []


def _triple(values: dict[str, float | None] | None) -> str:
    if not values:
        return "n/a"
    return "/".join(f"{(values[k] or 0) * 1e3:,.1f}" for k in ("p50", "p90", "p99")) + " ms"


def _fleet_lines(plan: Plan, row: Row, r: Replica) -> list[str]:
    x, t, h = row.expected, plan.traffic, plan.space.headroom
    assert x.point is not None and x.replicas is not None and x.gpus is not None
    tp = row.deployment.layout.gpus
    if t.rate_rps is not None:
        lines = [f"replicas = ceil(rate x (1 + headroom) / goodput) = ceil({t.rate_rps:g} x {1 + h:g} / "
                 f"{x.max_rate_rps:.3f}) = {x.replicas}; GPUs = {x.replicas} x {tp} = {x.gpus}"]  # fmt: skip
    else:
        assert x.capacity is not None  # an aggregated fleet keeps the capacity it was sized at
        held = users_capacity(r, x.capacity, t.think_time_s, plan.slos)
        per = int(x.pools[0][0])  # the fleet's own count (size_aggregated)
        why = ("whole users the goodput state holds; at a load limit, those it holds without waiting for prefill"
               if held >= 1 else "one user alone meets every SLO, more miss them")  # fmt: skip
        if x.point.round is not None and held >= 1:
            why = ("the most whole users whose lock-step round meets every SLO, up to the knee and the running cap; "
                   "one more breaks one or the limit binds")  # fmt: skip
        lines = [f"users per replica at goodput = {per:,} ({why}); replicas = ceil(users x (1 + headroom) / that) = "
                 f"ceil({t.concurrency:,} x {1 + h:g} / {per:,}) = {x.replicas}; GPUs = {x.replicas} x {tp} = "
                 f"{x.gpus}"]  # fmt: skip
    lines.append(f"utilization = rate per replica / saturation = {x.point.rate_rps:.3f} / {x.saturation_rps:.3f} "
                 f"= {x.utilization or 0:.0%}")  # fmt: skip
    if x.usd_per_hour is None:
        return lines + ["$/hour, $/1M tokens: no price for this GPU (--price NAME=USD)"]
    share_in, share_out = cost_shares(r, x.point)
    rate = x.point.rate_rps * x.replicas
    lines += [
        f"$/hour = {fmt.counted(x.gpus, 'GPU')} x ${x.usd_per_hour / x.gpus:g} = ${x.usd_per_hour:,.2f} (what plans "
        "rank by)",
        f"$/1M tokens = ${x.usd_per_hour:,.2f} / 3600 / ({rate:g} x {t.prompt_mean_tokens + t.output.mean:,.0f} "
        f"tokens/s) x 1e6 = {fmt.usd(x.usd_per_million_tokens)}",
        _split_line(r, x.point, share_in, share_out),
        f"$/1M input = ${x.usd_per_hour:,.2f} / 3600 x {share_in:.3f} / ({rate:g} x {t.prompt_mean_tokens:,.0f} "
        f"tokens/s) x 1e6 = {fmt.usd(x.usd_per_million_input_tokens)}",
        f"$/1M output = ${x.usd_per_hour:,.2f} / 3600 x {share_out:.3f} / ({rate:g} x {t.output.mean:,.0f} "
        f"tokens/s) x 1e6 = {fmt.usd(x.usd_per_million_output_tokens)}",
    ]
    return lines


def explain_lines(plan: Plan) -> list[str]:
    """The explanation as plain lines (JSON's `explain`, stderr for CSV)."""
    out = []
    for head, lines in explain_plan(plan):
        out.append(head)
        out += [f"  {line}" for line in lines]
    return out


def _split_line(r: Replica, pt: LoadPoint, share_in: float, share_out: float) -> str:
    """How the fleet's $/hour splits into input and output (fleet.cost_shares), with its divisor."""
    shares = f"input share {share_in:.1%}, output share {share_out:.1%}"
    if r.decode_steps_mean <= 0:
        return f"busy-time split: one-token answers, the prefill is the whole busy time: {shares}"
    if pt.round is not None:
        found = pt.round
        return (
            f"busy-time split: a round's prefill steps against its decode steps, sum L / (sum L + D) = "
            f"{fmt.ms(found.prefill_s)} / ({fmt.ms(found.prefill_s)} + {fmt.ms(found.decode_s)}): {shares}"
        )
    if lone_split(r, pt):
        return f"busy-time split: at this load, a lone request's own prefill against its decode steps: {shares}"
    k, rho = pt.decode_share, pt.rho
    return (f"busy-time split: prefill kappa rho = {k:.3f} x {rho:.3f} = {k * rho:.4f} over the busy share rho + "
            f"(1 - rho)(1 - e^-B) = {rho:.3f} + {1 - rho:.3f} x (1 - e^-{pt.batch:.4f}) = {busy_share(pt):.4f}: "
            f"{shares}")  # fmt: skip
