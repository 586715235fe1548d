"""Serving and planning: continuous batching with chunked prefill, priced from the engine's own roofline parts.

The server (vLLM, SGLang, TensorRT-LLM with chunked prefill): every step runs one token for each of the b
sequences in decode plus up to C prompt tokens (the chunk, vLLM's max_num_batched_tokens) taken first come
first served from the prefill queue, several prompts per step when they fit, in one pass that reads the
weights once. Each pass is priced by the engine's compiled kernels (engine/compiled.py: weights, KV reads of
every sequence, prefill FLOPs and attention, all-reduces; "ceiling" and "expected"); no formula of the roofline
is repeated here.

Notation: lambda arrivals/s (Poisson), P' prompt tokens computed (beyond a cached prefix p0 shared by all),
n = O - 1 decode steps, T0 a decode-only step, Tc a full chunk step, alpha = Tc / C.

1. Fixed point (replica.py). Little's law on decode: b = lambda E[n] TPOT. A decoding sequence sees lambda m
   prefill steps (m = E[P'] / C, plus part-filled last chunks) and (1 - rho) / T0 decode-only steps per
   second, so TPOT = 1 / (lambda m + (1 - rho) / T0), with rho = lambda E[S] the time share of prefill steps
   and S a prompt's full chunks plus its part of the step that runs its last chunk, shared with the prompts
   that joined the queue before that step (sharing.py). Solved for lambda given b (linear), so no iteration
   over the batch; T0 at batch b + 1 (itself plus Poisson(b) others; for an MoE the mean over that Poisson
   batch, the expert count being concave).
2. Limits (limits.py). Saturation: every step full of prefill, rho -> 1, b -> E[n] C / E[P']. The running
   cap: the engine's cap on running sequences (its profile's max_num_seqs, or --max-running) or the KV slots,
   the sequences the replica's KV capacity (engine.step.kv_capacity) holds whole beside the shared prefix,
   whichever is fewer ('KV memory' where the slots are): an open loop's request that finds every slot taken
   waits by Erlang C; a closed loop past its limit queues its extra users for admission, on TTFT only.
3. TTFT (ttft.py) = the engine's per-request cost (client-side) + the admission wait + the step in progress
   (open loop: a uniform residual; closed loop with no think time: the whole step less the client's round
   trip) + either its own chunks from the next step on (no backlog) or the M/G/1 wait on packed prefill work
   alpha P' behind a backlog (chance lambda alpha E[P'], the share of the steps' prompt budget used: a step
   takes every waiting prompt up to C tokens, so a lone tiny prompt adds a sliver to a step the decodes run
   anyway, never a step of queue service; Pollaczek-Khinchine mean, M/D/1 when lengths are fixed; given a
   wait, a gamma matched to Takacs' second moment) + own chunks + the tokens packed beside it in its last step.
   A closed loop's queue sees arrivals per step (loop.py); with fixed lengths its users come back in lock-step
   groups. An engine that schedules one step ahead (overlap scheduling) adds the next step to every arrival that
   finds the server busy: it was chosen before the request came.
4. TPOT per request = T0 + (1 - T0/Tp) x prefill time in its lifetime / n: a compound Poisson sum over its
   lifetime (variance lambda L E[S^2], skew from E[S^3]) plus the batch's swing (variance 2b/3 for an
   M/G/infinity count; binomial, 1 - b/N of it, for N closed-loop users), both amplified by the decode batch's
   feedback 1 / (1 - gain); a shifted gamma with that mean, variance and skew, never below a step with one
   sequence, gives the percentiles. ITL (latency.py) pools every gap between tokens: the share of steps that
   carry prefill at their length, the rest at T0. E2E = TTFT + n TPOT, moments added.
   An engine that runs prefill in steps of its own (vLLM before V1 with chunked prefill off, SGLang without
   mixed chunks: the profile's `prefill_steps_apart`) prices those steps without the decode batch and gives the
   decoders no token in them: Little's TPOT = T0 / (1 - rho), kappa = 1, and a decoder's gap after a decode
   step that saw an arrival (1 - exp(-lambda T0) of them) holds the whole run of prefill steps. Such an engine
   runs every waiting prompt before any decode, so a closed loop of fixed answers with no think time comes back
   as one group: priced as whole rounds (rounds.py: the N prompts' prefill steps, then N decoding together), step
   by step, in place of 1-4; past the running cap, the simulator's figures over a benchmark's length (the
   groups split as slots free, rounds.queued).
5. Goodput (capacity.py): the largest rate meeting every SLO, by bisection on b; never above saturation,
   never lower for a looser SLO. Fleet (fleet.py): replicas = ceil(rate (1 + headroom) / goodput) (closed
   loop: in users, at a limit the users held without queueing); $/hour = GPUs x price, what plans rank by;
   $/1M tokens spreads it over every token; $/1M input and output split it by busy time, each scenario by its own.
   Disaggregated: prefill and decode pools sized apart, each request's KV crossing the link (+ transfer / n
   on its TPOT).
6. Search (search.py, rows.py, ranking.py): GPU x layout (layout.py) x precision, with the engine's scheduler
   on each GPU (or a chunk search), ranked by $/hour, with the same choices under "ceiling" for the GPU-count
   range, the Pareto frontier and a load table; inputs.py bounds the work before it starts.
7. Check (simulate.py): a seeded discrete-event simulation of the same scheduler on the same engine pricing, with
   clients that re-send one round trip after their last token.

Approximations, and why: Poisson arrivals (open loop; closed loop by Little on users); fluid prefill work
with a correction for part-filled last chunks, since packing makes most steps full under load; a gamma tail
for the wait, exact for M/M/1 and lighter for steadier service; independence of TTFT and TPOT in E2E. Where
a step's time barely depends on its prefill tokens (an MoE whose decode batch already touches every
expert), TTFT tails come out up to ~30% high near saturation (conservative).
"""
