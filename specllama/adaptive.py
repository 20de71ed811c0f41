"""How many tokens to draft next: the k that maximises expected tokens per
second, from online estimates of what this machine and this pair cost.

With a_i the chance that draft position i is accepted once positions before
it were (estimated per position), the expected tokens of one pass with k
drafts are (Leviathan et al. 2023, with position-dependent rates)

    E(k) = 1 + a_0 + a_0 a_1 + ... + a_0 ... a_{k-1},

and the pass costs t_first + (k - 1) * t_draft + t_verify(k + 1 rows). The
policy picks argmax_k E(k) / cost(k) over minimum..cap; k = 0 is plain
target-only decoding. A pass's first draft step is timed apart: after a pass
that kept all its drafts it evaluates two tokens, the last draft and the bonus
token (1.2x a step on the demo's draft, 1.7x on demo-chat's). Counted as k
equal steps, 8 drafts looked 5-13% dearer in draft time (3-8% of the pass) to a
policy at k = 3. (An approximation: the first step's cost depends on whether
the previous pass kept all its drafts, so on its k; t_first is the recent
typical one for every k.)

Robust for a first-time user and in a long-lived process:

- Acceptance: a pooled rate over all positions, which each position's own
  (decayed) record refines only as its evidence grows (``LEAN_WEIGHT``),
  starting from a prior rate set by the warm-up's check of a short greedy
  draft (``WARM_UP_AGREEMENT_WEIGHT``; the constant ``PRIOR_ACCEPT`` alone
  without it), which weighs as many positions as it checked tokens
  (``CHECKED_TOKEN_WEIGHT``);
  near-ties go to the longer draft (``TIE``). Giving drafting up uses an
  upper confidence bound of each rate, so a position tried rarely (or never)
  is assumed as good as it may plausibly be, and a few early rejections do
  not end drafting: longer drafts keep being tried while they might pay.
  Drafting is not given up on the acceptance seen before ``MIN_EVIDENCE``
  drafting passes (only :meth:`DraftLengthPolicy.cannot_pay` ends it at
  once): a text whose first drafts miss (one rejected first position moved
  the pooled rate from 0.93 to 0.74, and on costs where only long drafts pay
  that ended drafting after one pass, in 4 of 8 real runs of one prompt)
  does not decide the whole generation, nor does a warm-up's prior rate on
  its costs alone. The choice is optimistic about positions not tried yet
  (``UNTRIED_OPTIMISM``), so a longer draft is tried after early misses.
  Records fade with every drafting pass, also those of positions not
  reached, so an old verdict on a position is forgotten.
- Costs: the median of the recent timings of each kind (a draft step; a
  pass's first draft step; a verify pass of each row count: more of them
  for 1-row passes, ``ONE_ROW_WINDOW``, those older than ``ONE_ROW_AGE``
  passes leaving but for the latest ``VERIFY_WINDOW``), started from
  the warm-up at load (the median of >= 3 timings each of a draft step and
  of target passes of 1, 2 and cap + 1 rows: :func:`warm_up_rows`). Passes
  of more than one row are priced on one smooth curve through all their
  timings once three multi-row counts are timed (:func:`smooth_rows`): each count
  on its own few timings was too noisy to tell neighbouring draft lengths
  apart. Before that, row counts timed too rarely are estimated from their
  neighbours, optimistically, so they get measured.
- The warm-up's timings against decoding's: the warm-up times the models
  alone, and on a GPU far from what decoding pays (an H200: a 1-row pass
  1.4-2.3x, a draft step 0.6x). The first drafting pass is set against
  what the warm-up's timings say it costs; where it took over 1 / ``SUSPECT``
  of that, the warm-up's draft steps are scaled to the pass's, and where the
  choice hinges on the 1-row cost (``HINGE``), target-only passes time it:
  the first ``TRUSTED`` of decoding judge the warm-up's 1-row timings, which
  leave where those are under ``CONTRADICTED`` of theirs (drafting passes
  never time a 1-row pass).
- A GPU's changes of shape: there a target pass costs more when it is one of
  the first two of its row count in a row (CUDA graphs: ``SETTLED``). The
  engine counts them; where a 1-row pass right after another shape costs over
  ``SWITCH_DEAR`` times a settled one, only settled passes time a cost, a new
  draft length is kept until one of its passes is settled, a draft length is
  kept while it is within ``STICKY`` of the best, explorations come
  ``SWITCH_EXPLORE`` times as rarely and close calls not at all: each change
  of k costs two switches there.
- Close calls: where the best draft length's expected gain over target-only
  is under ``CLOSE_CALL``, the choice turns on the costs' noise, and drafting
  times only its own side (a 1-row pass is timed by target-only passes alone):
  a warm-up's 1-row timing drawn high kept a losing draft length on, with a
  target-only pass timed only by the exploration every 3 x ``EXPLORE_EVERY``
  passes. So there a target-only pass is timed every ``CLOSE_CALL_EVERY``
  passes, and both sides are judged by recent timings. Not where the cap made
  the choice small (a call's last tokens) or a minimum draft length forbids k = 0.
- When the costs are known and even perfect acceptance cannot pay (for every
  k, (k + 1) tokens per t_first + (k - 1) * t_draft + t_verify(k + 1) is
  slower than one token per t_verify(1)), the policy decodes target-only from the first pass
  (:meth:`DraftLengthPolicy.cannot_pay`, which the engine announces once) and
  re-measures the costs now and then with a padded target-only pass
  (:meth:`DraftLengthPolicy.take_probe`), ever more rarely up to a bound.
  Target-only passes alone do not reopen that verdict (a machine that got
  busier would look like one where drafting pays), but where their timings
  say it would turn by ``RECHECK_MARGIN``, the other kinds are timed
  again: ``RECHECK_PROBES`` padded 2-row passes (the cheapest) with a
  draft step each, each followed by a 1-row pass, so that both sides
  are timed at the same moment. Every
  estimate is then taken at this moment: the 1-row and 2-row passes and the
  draft step from the recheck's timings, the older timings of other row counts
  scaled as the 2-row passes grew dearer or cheaper, and of a pass's first
  draft step as the draft steps did (a warm-up whose 1-row passes were drawn
  fast, 18.8 ms against 21.5 in real passes, put drafting below the margin
  for a whole generation where fixed k = 8 ran 1.17-1.39x target-only: the
  chat pair on a 2-core VM; a busy moment's 1-row passes set against calm
  2-row ones read k = 1 as paying where nothing did: the coder pair there,
  also where the busy moment ended just as the 2-row passes were timed).
  Each probe's timings are taken against its own 1-row pass, and a recheck
  turns the verdict only where drafting would gain ``REOPEN_MARGIN``, and
  decoding then confirms it: every other pass is target-only until
  ``CONFIRM`` 1-row passes are timed, outnumbering the recheck's. It
  ends early where its probes so far already say that even perfect
  acceptance cannot pay (``RECHECK_SETTLED``): the verdict then stands on
  this moment's costs (three probes, each a 2-row pass and a draft step,
  cost 1.5% of a 256-token run on the coder pair's costs, and in the
  simulator another process's busy moments started a recheck once or twice
  a run, nearly all of which confirmed the verdict).
- When drafting could pay but the acceptance seen says it does not, the
  policy decodes target-only too, probing with a draft every 16, 32, ..., at
  most ``MAX_PROBE_GAP`` passes. Giving drafting up asks for its rates to
  fall short at ``FALLBACK_OPTIMISM`` standard errors above the estimates;
  taking it up again asks them to pay at ``RESUME_OPTIMISM`` (fewer): one
  lucky probe does not restart a long run of losing passes.

Exactness: k is fixed before any draft token of the pass is drawn, from
past passes only, so it cannot bias the tokens (see engine.py).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import deque
from dataclasses import dataclass, field

import numpy as np

DEFAULT_DRAFT_MAX = 8  # the cap of the adaptive draft length (--draft-max)
PAY_MARGIN = 0.10  # drafting that would gain less than this at perfect acceptance is not tried
# Acceptance assumed before anything is observed, and how many passes it weighs as. A pair
# that shares a tokenizer and a family keeps most drafts (the demo pairs 93-95% at every
# position); a light prior lets a few passes say otherwise. With 0.7 weighing 8 passes a
# fresh process spent tens of passes climbing from k = 1 to the best k (issue 18).
PRIOR_ACCEPT = 0.85
PRIOR_WEIGHT = 4.0
# The warm-up at load has the draft write a short text and the target check it in one batch
# (engine.py). The prior rate becomes the mean of the tokens' agreement, each token weighing
# this much, and PRIOR_ACCEPT weighing PRIOR_WEIGHT: 16 of 16 agreed give 0.983, 8 of 16
# 0.539. A fresh process then starts near the pair's own rate, not at k = 2-3 for the
# passes the constant prior takes to be outweighed (the worst replays of short texts in
# tests/test_policy_sim.py).
WARM_UP_AGREEMENT_WEIGHT = 2.0
# ... and in the pooled rate the prior then weighs PRIOR_WEIGHT plus this many positions per token
# checked: the check is evidence of the kind a pass gives (a draft token the target agrees with or
# not), 16 tokens of it. Weighing PRIOR_WEIGHT alone, a text's first two missed drafts (the story
# prompt's first and sixth tokens on the demo pair, the chat prompt's first and tenth on demo-chat)
# put the pooled rate at 0.70 after four positions, and a fresh process drafted 1-3 tokens a pass
# for 12 passes where fixed k = 8 kept 97% of the rest (benchmarks/RESULTS.md).
CHECKED_TOKEN_WEIGHT = 1.0
# A position's estimate leans on the one before it (position 0: on the pooled rate) with
# this weight: its own record departs from that only once it outweighs 16 passes. Real
# rejections fall at hard tokens of the text, at whatever position they land, so one
# rejection at position 3 says little about position 3 (with 4, the choice fled such
# positions for tens of passes; tests/test_policy_sim.py's real traces).
LEAN_WEIGHT = 16.0
DECAY = 0.99  # at each drafting pass, older acceptance observations fade
OPTIMISM = 0.0  # the choice among draft lengths uses estimate + OPTIMISM standard errors
# ... and a position not tried yet (its decayed count of tries under one) at estimate + this many: after a text's
# first drafts missed, the estimates sat near 0.8, the choice stayed at k = 1-3 and positions past it were never
# tried, for 12-20 passes where fixed k = 8 kept 97% of the rest (the chat pair: 40-56 passes against fixed k = 8's
# 32); at one standard error, one longer draft gets tried, and its record then speaks for it
UNTRIED_OPTIMISM = 1.0
FALLBACK_OPTIMISM = 1.0  # ... and drafting is given up only if it cannot pay at estimate + this many
RESUME_OPTIMISM = 0.5  # ... and once given up, taken up again only if it pays at estimate + this many
PRIOR_ROW_SLOPE = 0.1  # each extra verify row costs this share of one row, until measured
# Draft lengths whose expected speed is within this share of the best are a tie, which
# the longest wins: at ~99% acceptance k = 3..8 are within a few percent of each other
# on the estimates, and a longer draft measures more positions at no expected cost.
TIE = 0.01
START_K = 4  # the first pass, before any cost is known
EXPLORE_EVERY = 16  # passes between probes of a neighbouring k
MAX_PROBE_GAP = 256  # after a fallback to k = 0 on acceptance, probes come ever rarer, up to this
COST_PROBE_GAP = 512  # when drafting cannot pay: passes before the costs are first measured again
MAX_COST_PROBE_GAP = 4096  # ... and at most between two such measurements
PROBE_BUDGET = 0.02  # a probe's catch-up may cost this share of the target-only time since the last probe
# Cost probes in a row when target-only timings contradict a cannot-pay verdict (see the module's
# docstring); a recheck that confirms the verdict makes the next wait twice as long, from RECHECK_GAP
# passes up to COST_PROBE_GAP.
RECHECK_PROBES = 3
# (of 2 rows, the other row counts scaled as those grew dearer: with 9 rows re-timed and the 2-row passes left at the
# warm-up's calm cost, a busy moment's 1-row timings read k = 1 as paying, and the coder pair's recheck caught the
# draft up and drafted at a loss in 10 of 12 rechecks on a 2-core VM, where three 9-row passes cost 0.8 s besides:
# benchmarks/RESULTS.md, "Twenty rounds of the chat pair, the coder pair's rechecks, a long-lived process")
# Each probe is followed by a 1-row pass, and the recheck's verdict is judged on those: where the 1-row timings that
# started it were a busy moment that ended as the probes began, the busy 1-row timings against calm 2-row ones read
# k = 1 as paying (simulated, busy moments of 2-3 passes in each hundred on the coder pair's costs: 24-27% of passes
# drafting, 0.86-0.87 of target-only; benchmarks/RESULTS.md, "A recheck times both sides at the same moment; the
# coder pair to 20 rounds")
# ... and only where those timings put perfect acceptance this far above target-only: on the coder pair's
# costs (0.94x) the noise of the latest timings alone started a recheck in 94 of 108 simulated fresh
# processes at PAY_MARGIN (3 padded passes each, 0.95 of target-only's speed), in 12 at 0.2; and with each probe
# followed by a 1-row pass (e78d36c), noise alone still started 14-18 rechecks in 108 processes at 0.2, against
# 0-2 at 0.3 (1.0011-1.0035 of target-only, against 1.0051-1.0054), where busy moments of 2, 3, 6 and 12 passes
# in each hundred still start them (0.967, 0.965, 0.971, 0.966 of target-only under the same moments, against
# 0.972, 0.968, 0.974, 0.973), and the chat pair's thin-margin case, a real gain a recheck must find, holds (10th
# percentile 0.954, against 0.938; python benchmarks/policy_sim.py --set RECHECK_MARGIN=0.3; benchmarks/RESULTS.md,
# "Rarer rechecks; a slower, noisier VM")
RECHECK_MARGIN = 0.3
RECHECK_GAP = 32
# A recheck ends after any probe but its last where its timings so far (each against its own 1-row pass) say that
# even perfect acceptance gains at most this: the verdict stands on them, and the older timings of the other kinds
# are taken to this moment (a later cost probe reopens the verdict on them). Simulated, busy moments of 2, 3, 6 and
# 12 passes in each hundred on the coder pair's costs (4 seeds each): 0.987, 0.996, 0.991, 0.989 of target-only
# under the same moments, against 0.975, 0.972, 0.975, 0.974 with three probes every time; the chat pair's
# thin-margin case over 192 processes: 10th percentile 0.930 against 0.934, 2 processes drafting in fewer than 20
# passes against 1 (python benchmarks/policy_sim.py --seeds 4, and --policy-from 66c253b --seeds 4;
# benchmarks/RESULTS.md, "A recheck that stops once its first probe says no")
RECHECK_SETTLED = 0.0
# A recheck turns the verdict only where this moment's costs say perfect acceptance gains more than this (the
# verdict's margin otherwise is PAY_MARGIN): three timings of each kind are noisy, and on the coder pair's thin
# margin a recheck's noise alone turned it (simulated, busy moments of 6 passes in each hundred: 1.4% of passes
# drafting, 0.971 of target-only, against 2.5% and 0.963 at PAY_MARGIN; at 0.2, the chat pair's thin-margin case,
# a real gain of 1.16x where a warm-up's fast 1-row timings said cannot-pay, fell to a 10th percentile of 0.927:
# python benchmarks/policy_sim.py --set REOPEN_MARGIN=0.1, =0.2)
REOPEN_MARGIN = 0.13
MIN_EVIDENCE = 8  # drafting passes observed before the policy may give drafting up on the acceptance seen
DRAFT_WINDOW = 32  # recent draft steps whose median is the draft cost
VERIFY_WINDOW = 8  # recent passes of one row count whose median is its cost
# ... and of 1-row passes, which every choice is weighed against. While the policy drafts, few 1-row passes are
# timed (a close call's, an exploration's), and with 8 a high draw held: it made drafting look better, so the policy
# kept drafting, and no more 1-row passes came to outvote it. Simulated at acceptance 0.5 on the demo's costs
# (target-only the best fixed k), fresh processes read 0.959 of target-only over 4 seeds with 8, 0.983 with 64,
# and 0.990 (one seed) when told the 1-row pass's true cost; the other cases where drafting pays move by at most
# 0.0013 in the mean over 4 seeds but one, a long-lived process at 0.8 whose first 6 passes are rejected:
# 0.9815 -> 0.9742 (seeds 0.9697-0.9782) (python benchmarks/policy_sim.py --seeds 4, and --policy-from 5a34465
# --seeds 4, --exact-costs 1; benchmarks/RESULTS.md, "Where the simulator's shortfalls come from: the 1-row pass's
# cost; the coder pair at 0.8 and the chat pair at 0 to 20 rounds")
ONE_ROW_WINDOW = 64
# ... of which those timed more than this many passes ago (choices made) leave it, but for the latest VERIFY_WINDOW:
# a window this long followed a lasting change in the machine slowly (a long-lived process whose machine got calmer
# kept its busy 1-row cost and drafted where target-only was best: tests/test_policy_sim.py's drift case, with the
# figures). Fresh processes of 256 tokens never reach it. 64 and 128, one seed of 36 processes: as good at 0.5 after
# a 1.5x stretch and better after 2x, but worse at 0.8 after 1.5x (benchmarks/RESULTS.md, "A 1-row cost that follows
# a machine that changes").
ONE_ROW_AGE = 256
# Passes of more than one row are priced on one smooth curve through every multi-row count's timings, not each on its
# own few: a penalised least-squares fit (a Whittaker smoother) whose squared second differences weigh this many
# timings each. Each count on its own, the median of <= 8 timings of +-20% noise was off by 6-7% (sd), where
# neighbouring draft lengths differ by 1-3% in expected speed, and the choice wandered over k = 1..8 where k = 2-4
# were the best: simulated, acceptance falling by position (0.95 to 0.67) read 0.959 of the best fixed k (4 seeds
# 0.9578-0.9605), 0.975 told the true costs. On the curve: 0.972 (4 seeds 0.9719-0.9751). Stiffer curves gain a
# little more there and on the demo pair's costs measured at every row count (which have a kink: a 7.8 ms step
# between 6 and 7 rows where the others are 3-4.5 ms), but lose on the real traces' measured costs (10th percentile
# at 0.8: 0.955 at 50, 0.951 at 100, against 0.958 at 30 and 0.956 before) and on the chat pair's thin margin (192
# processes, median 0.998 at 50 against 1.003 at 30 and 1.006 before): benchmarks/RESULTS.md, "One curve for the
# target's multi-row passes". The 1-row pass stays apart: the second row costs far more than each row after it.
ROW_SMOOTHING = 30.0
CURVE_MIN_COUNTS = 3  # multi-row counts timed before the curve prices them (with two, any line fits both exactly)
OUTLIER = 2.0  # a timing over this many times the fastest of its kind (or a row count's interpolation) is left out
TRUSTED = 3  # timings of a row count before its own are trusted over its neighbours' estimate
# ... before that, an interpolation between timed row counts counts as this many timings of
# its own. (It was the lower of the two: the least of one or two noisy timings is a low draw,
# and the choice then stayed on that row count until it was timed TRUSTED times.)
ESTIMATE_WEIGHT = 1.0
SAVED_WEIGHT = 4.0  # a saved acceptance record counts as this many passes
WARM_UP_TIMINGS = 5  # timings of each kind at load (their median is used)
# Where the best draft length's expected gain over target-only is below this share, the
# choice turns on the costs' noise: a target-only pass is timed whenever the last was this
# many passes ago, so both sides are judged by timings of the same time.
CLOSE_CALL = 0.10
CLOSE_CALL_EVERY = 8
# The warm-up times the models' evaluations alone, at load; decoding's timings also hold each row's sampling, and
# on a GPU the warm-up's passes came out far from decoding's: on an H200 the demo pair's warm-up timed a 1-row pass
# at 1.4-2.3x what target-only decoding paid (2.1-3.4 ms against 1.43-1.58, sampling included) and a draft step at
# 0.6x (1.05-1.18 ms against 1.69-1.82), drafting looked like it paid, drafting passes re-time their own side but
# never a 1-row pass, and fresh processes ran at 0.61 of target-only where no draft length pays (benchmarks/RESULTS.md,
# "On a GPU"). So the first drafting pass is set against what the warm-up's timings say it costs: where it took over
# 1 / SUSPECT of that, the warm-up's draft steps are scaled to the pass's, and its 1-row timings are suspect; where
# the choice then hinges on them (even perfect acceptance would not pay if a 1-row pass cost HINGE of the estimate),
# target-only passes time a 1-row pass before drafting goes on. The first TRUSTED target-only passes of decoding
# (these, or any other but a recheck's) judge the warm-up's 1-row timings: where their median is under CONTRADICTED
# of the warm-up's, the older 1-row timings leave. A probe or a recheck's end, which time the costs again, ends
# both judgements. Simulated on those costs (tests/test_policy_sim.py, GPU_DEMO):
# 0.975-0.980 of target-only where the warm-up read the 1-row pass 1.5-2x dear, against 0.820 and 0.660 (acceptance
# 0.95; at 0.8, 0.955-0.972 against 0.785-0.894). On the
# 2-core VM none of 19 fresh processes of the demo and chat pairs (temperatures 0 and 0.8) found its first pass that
# far off (benchmarks/runs/gpu-2026-12-04/cpu_flags.txt),
# a decoding 1-row pass costs at least the warm-up's (it also samples), and every other case of the simulator reads
# as before but a machine that got calmer (0.9954 and 0.9800 -> 0.9950 and 0.9810; python benchmarks/policy_sim.py,
# and --policy-from c0c6edf: benchmarks/runs/gpu-2026-12-04/policy_sim_after.txt, policy_sim_before_c0c6edf.txt).
CONTRADICTED = 0.7
HINGE = 0.5
SUSPECT = 0.75
# On a GPU a pass's cost also depends on the passes before it: llama.cpp (ggml-cuda's graph_compute) runs a pass whose
# shape (tokens, logits rows) differs from the one before directly, captures the next as a CUDA graph, and replays the
# graph from the third in a row. The warm-up timed each 1-row pass right after a 2-row pass, so on the H200 it read
# 2.2-3.7 ms where target-only decoding paid 1.44-1.79; with the judgements above, fresh processes still drafted, at
# 0.58-0.59 of target-only: the 1-row passes that drafting times (a close call's, a recheck's right after its probe)
# follow other shapes too, and read as dear (benchmarks/RESULTS.md, "On a GPU, again: the change measured, and CUDA
# graphs"). So a target-only pass tells the policy how many passes of its shape came in a row, itself included (the
# engine counts them): from SETTLED on it is what target-only decoding pays, and one before it is a switch. On a GPU
# the warm-up times both; where the switches' median is over SWITCH_DEAR times the settled passes', a switch is no
# timing of the 1-row cost (a recheck then waits for a settled 1-row pass after its probe). On a CPU the two cost the
# same (0.975-1.046x: benchmarks/runs/gpu-2026-12-04/switch_cpu.txt), and every timing counts as before. Simulated
# (tests/test_policy_sim.py, gpu_graphs): 0.977-0.984 of target-only where a switch costs 1.5-2x, against 0.587-0.934.
# Every change of draft length costs two switches there, so where a switch is dear a draft length is kept while it is
# within STICKY of the best, explorations come SWITCH_EXPLORE times as rarely, close calls not at all, and a new draft
# length is kept until one of its passes is settled: where drafting pays (gpu_pays), 0.981-0.983 of the best fixed k
# at acceptance 0.95 and 0.917-0.938 at 0.8, against 0.864-0.900 and 0.734-0.825 (d68a724).
# A recheck that turns a cannot-pay verdict stands on its own three 1-row passes, and drafting passes time no 1-row
# pass: in a slower period on a 2-core VM the coder pair's rechecks turned the verdict in 5 of 15 (a recheck's 1-row
# passes 1.28x the warm-up's where its 2-row probes were 1.17x), and those runs drafted at a loss for 8 to 75 passes
# (0.574 of target-only at worst: benchmarks/RESULTS.md, "The coder pair at 0.8, 20 rotated rounds, twice"). So a
# turned verdict is confirmed by decoding: every CONFIRM_EVERY-th pass is target-only until CONFIRM 1-row passes of
# decoding are timed, which then outnumber the recheck's TRUSTED in the 1-row cost's median (tests/test_adaptive.py:
# 5 drafting passes where a recheck's 1-row passes alone ran 1.75x, against 149 of 300 without). Simulated
# (benchmarks/runs/confirm-2026-12-04): the coder pair's busy moments 0.982-0.995 -> 0.986-0.995 of target-only,
# drafting in 38-92 passes of about 27,000 where 68-326 did before; moments of slow 1-row passes alone (6 and 12 in
# each hundred) 0.892 and 0.895 -> 0.935 and 0.916; the chat pair's thin margin, a real gain a recheck must find, as
# before (10th percentile 0.949; with 3, --set CONFIRM=3: 0.945; a first version that put 3 of decoding's in place
# of the recheck's took that gain back in 1 of 48 processes).
CONFIRM = 2 * TRUSTED - 1  # (decoding's 1-row timings then outnumber the recheck's TRUSTED)
CONFIRM_EVERY = 2
SETTLED = 3
SWITCH_DEAR = 1.3
STICKY = 0.1
SWITCH_EXPLORE = 4


def typical(timings) -> float:
    """The median of the timings within ``OUTLIER`` times the fastest: noise
    averages out, while a pass slowed by a cold cache or another process
    does not count (timings only err upward that far)."""
    fastest = min(timings)
    return statistics.median([t for t in timings if t <= OUTLIER * fastest])


@functools.lru_cache(maxsize=8)
def _roughness(size: int) -> np.ndarray:
    """D'D for D the second differences of ``size`` values: sum (v_(r-1) - 2 v_r + v_(r+1))^2 = v' D'D v."""
    second = np.diff(np.eye(size), 2, axis=0)
    return second.T @ second


def smooth_rows(timings: dict[int, "deque[float] | list[float]"]) -> dict[int, float] | None:
    """Row count -> seconds for every count from the fewest timed to the most,
    on one smooth curve through the timings (``timings``: row count -> its
    recent timings; None where fewer than ``CURVE_MIN_COUNTS`` counts are timed).
    The curve v minimises sum_r n_r (v_r - m_r)^2 + ROW_SMOOTHING * sum_r
    (v_(r-1) - 2 v_r + v_(r+1))^2, with m_r a count's :func:`typical` timing
    and n_r the timings that takes. A count timed fewer than ``TRUSTED`` times
    (where :func:`typical` cannot tell a cold timing) is first set against the
    curve through the other counts alone, and its timings over ``OUTLIER``
    times that are left out (a pass timed cold: that length is then tried again,
    not avoided). Counts never timed lie on the curve between their neighbours."""
    timed = {rows: list(ts) for rows, ts in timings.items() if ts}
    if len(timed) < CURVE_MIN_COUNTS:
        return None
    low, high = min(timed), max(timed)
    size = high - low + 1
    penalty = _roughness(size) * ROW_SMOOTHING

    def fit(kept: dict[int, list[float]]) -> np.ndarray:
        weight, target = np.zeros(size), np.zeros(size)
        for rows, ts in kept.items():
            if ts:
                fastest = min(ts)
                weight[rows - low] = sum(1 for t in ts if t <= OUTLIER * fastest)
                target[rows - low] = typical(ts)
        return np.linalg.solve(np.diag(weight) + penalty, weight * target)

    kept = dict(timed)
    for rows, ts in timed.items():
        if len(ts) < TRUSTED:
            others = fit({other: t for other, t in timed.items() if other != rows})[rows - low]
            kept[rows] = [t for t in ts if t <= OUTLIER * others]
    return {low + i: float(v) for i, v in enumerate(fit(kept))}


def warm_up_rows(cap: int) -> tuple[int, ...]:
    """The target passes the warm-up at load times (row counts): one row, two
    and ``cap`` + 1. A second row costs far more than each row after it
    (llama.cpp leaves its one-row path): on a 2-core VM both demo pairs'
    2-row passes took 1.60x one row, where a straight line through 1 and 9
    rows (2.63x, 2.66x) says 1.20x (benchmarks/RESULTS.md, "Short drafts'
    real cost"). On that line short drafts looked a quarter too cheap, and
    a fresh process whose first drafts missed lingered at k = 1-3 on a text
    where k = 8 paid."""
    return tuple(sorted({1, 2, cap + 1})) if cap >= 1 else (1,)


def expected_tokens(accept: list[float], k: int) -> float:
    """E(k) = sum_{j=0..k} prod_{i<j} a_i."""
    total, run = 1.0, 1.0
    for i in range(k):
        run *= accept[i]
        total += run
    return total


def _drafts_cost(k: int, draft_seconds: float, first_seconds: float | None) -> float:
    """Seconds for k draft steps: the first ``first_seconds`` (None: a step like the others)."""
    if k <= 0:
        return 0.0
    return (draft_seconds if first_seconds is None else first_seconds) + (k - 1) * draft_seconds


def cannot_pay(draft_seconds: float, verify_cost, cap: int, margin: float = PAY_MARGIN,
               first_seconds: float | None = None) -> bool:
    """Whether even perfect acceptance cannot pay: for every k in 1..cap,
    (k + 1) tokens per t_first + (k - 1) * t_draft + t_verify(k + 1) is at
    most ``margin`` faster than one token per t_verify(1). ``verify_cost``
    maps rows to seconds; ``first_seconds`` is a pass's first draft step
    (None: a step like the others; at perfect acceptance every first step
    evaluates two tokens). The margin: a gain that small at perfect
    acceptance is lost to any real rejection rate, and to the noise of the
    timings it is judged on."""
    one = verify_cost(1)
    return all((k + 1) * one <= (1 + margin) * (_drafts_cost(k, draft_seconds, first_seconds) + verify_cost(k + 1))
               for k in range(1, cap + 1))


def cost_verdict(draft_seconds: float, verify_cost, cap: int, first_seconds: float | None = None) -> str:
    """The costs' verdict in words, with the figures: whether drafting can pay
    at all, and why not when it cannot (draft step vs target step; verify
    cost of k+1 rows vs one row)."""
    one = verify_cost(1)

    def cost(k: int) -> float:
        return _drafts_cost(k, draft_seconds, first_seconds) + verify_cost(k + 1)

    best = max(range(cap + 1), key=lambda k: (k + 1) / cost(k))
    full = verify_cost(cap + 1)
    figures = (f"draft step {1000 * draft_seconds:.1f} ms vs target step {1000 * one:.1f} ms "
               f"({draft_seconds / one:.2f}x); verify of {cap + 1} rows {1000 * full:.1f} ms vs one row "
               f"{1000 * one:.1f} ms ({full / one:.2f}x)")
    if cannot_pay(draft_seconds, verify_cost, cap, first_seconds=first_seconds):
        why = ("a draft step costs as much as a target step" if draft_seconds >= one else
               "verifying more rows costs almost as much as decoding them one by one")
        return (f"drafting cannot pay on this machine for this pair, even if every draft were accepted: {why} "
                f"({figures})")
    gain = (best + 1) * one / cost(best)
    return (f"drafting can pay on this machine for this pair: up to {gain:.2f}x at k = {best} if every draft "
            f"were accepted ({figures})")


def _best_drafting(rates: list[float]) -> int:
    """The best k >= 1 by ``rates`` (expected tokens per second of k = 0..cap),
    the longest of those within ``TIE`` of it."""
    best = max(range(1, len(rates)), key=rates.__getitem__)
    return max(k for k in range(best, len(rates)) if rates[k] >= (1 - TIE) * rates[best])


def _drafting_pays(accept: list[float], costs: list[float], margin: float = 0.0) -> bool:
    """Whether some k >= 1 beats target-only: more expected tokens per second
    at acceptance ``accept`` (by position) with pass costs ``costs`` (k = 0..cap),
    or comes within ``margin`` of it."""
    return (1 + margin) * max(expected_tokens(accept, k) / costs[k] for k in range(1, len(costs))) > 1 / costs[0]


@dataclass
class DraftLengthPolicy:
    """Online estimates and the choice they imply. One per engine, kept
    across generations (costs do not change between prompts)."""

    accepted: list[float] = field(default_factory=list)  # decayed counts, by position
    tried: list[float] = field(default_factory=list)
    draft_steps: deque = field(default_factory=lambda: deque(maxlen=DRAFT_WINDOW))  # seconds per draft step
    first_steps: deque = field(default_factory=lambda: deque(maxlen=DRAFT_WINDOW))  # a pass's first step, seconds
    verify_passes: dict[int, deque] = field(default_factory=dict)  # rows -> recent seconds per pass
    # the pass each of the latest 1-row timings was taken at (aligned with verify_passes[1] from its newest)
    _one_row_at: deque = field(default_factory=lambda: deque(maxlen=ONE_ROW_WINDOW))
    passes: int = 0
    drafting_passes: int = 0  # passes observed that drafted something
    # While drafting does not pay, the draft model falls behind (it evaluates
    # nothing) and a probe must first catch up: probe after 16, 32, 64, ...
    probe_gap: int = EXPLORE_EVERY
    since_probe: int = 0
    last_timed: dict[int, int] = field(default_factory=dict)  # rows -> the pass that last timed them
    # When even perfect acceptance cannot pay: passes between re-measurements of the costs
    cost_probe_gap: int = COST_PROBE_GAP
    catch_up_seconds: float = 0.0  # the draft's catch-up after target-only passes, all told
    catch_up_tokens: int = 0
    behind: int = 0  # tokens the draft model has not evaluated (passes without drafts, a prompt not fed to it)
    gave_up: bool = False  # drafting was given up on the acceptance seen (resuming then asks for more)
    prior_accept: float = PRIOR_ACCEPT  # acceptance assumed before any is observed (the warm-up's, once measured)
    prior_weight: float = PRIOR_WEIGHT  # positions the prior rate weighs in the pooled rate (more once checked)
    # the costs cannot_pay judges by: (draft step, first step, rows -> seconds), kept until
    # other costs than one row's are timed
    _verdict: tuple[float, float, dict[int, float]] | None = None
    _probe_rows: int = 0  # rows of the padded target-only pass the engine is asked to time next
    # passes left in a recheck of a cannot-pay verdict: even, a probe (2 rows and a draft step) comes next; odd, a
    # 1-row pass
    _rechecking: int = 0
    _verdict_margin: float = PAY_MARGIN  # the margin the verdict is judged at (after a recheck: REOPEN_MARGIN)
    _recheck_cap: int = 0  # the cap the recheck's verdict is judged at
    _recheck_gap: int = RECHECK_GAP  # passes before another recheck may start
    _recheck_at: int = -RECHECK_GAP  # the pass the last recheck started
    rechecks: int = 0  # rechecks started, all told
    probes: int = 0  # padded target-only passes timed (a recheck's, a cost probe's), all told
    warm_up_costs: dict = field(default_factory=dict)  # the warm-up's medians, seconds (for --json's "policy")
    _close_call_at: int = 0  # the pass of the last close call (its k = 0 may have gone untimed: lookup drafts)
    # after a recheck turned a cannot-pay verdict: the 1-row passes of decoding still to time (CONFIRM)
    _confirming: int = 0
    _warm_rows: dict[int, float] = field(default_factory=dict)  # the warm-up's passes: rows -> median seconds
    # the warm-up's median 1-row pass, until target-only passes of decoding have judged it (CONTRADICTED; None after)
    _warm_one_row: float | None = None
    _decoded_one_row: list[float] = field(default_factory=list)  # ... and those passes' timings so far
    # the warm-up's median draft step, until a drafting pass has judged it (SUSPECT; None after), and how many of
    # draft_steps' timings are not decoding's (a remembered one, the warm-up's)
    _warm_step: float | None = None
    _undecoded_steps: int = 0
    _warm_off: bool = False  # they did: the warm-up's 1-row timings are then suspect too (HINGE)
    # 1-row passes by the passes of their shape in a row (SETTLED): the latest settled ones, and switches
    _settled_one_row: deque = field(default_factory=lambda: deque(maxlen=VERIFY_WINDOW))
    _switch_one_row: deque = field(default_factory=lambda: deque(maxlen=VERIFY_WINDOW))
    # whether a 1-row pass right after a pass of another shape costs over SWITCH_DEAR times a settled one (medians of
    # the two windows above, TRUSTED timings each at least: judged again whenever they change, _judge_switch)
    switch_dear: bool = False
    # where a switch is dear: the last choice, and how many more passes keep it so that one of them is settled
    _last_k: int = -1
    _settling: int = 0
    # verify_seconds, computed once per timing (each choice reads it for every k): whatever changes
    # verify_passes (observe_verify, a recheck's end) clears it
    _typical_verify: dict[int, float] | None = field(default=None, repr=False)
    # (the verify_seconds it was computed with, _curve's result)
    _smooth: tuple[dict[int, float], dict[int, float] | None] | None = field(default=None, repr=False)

    # -- estimates --------------------------------------------------------

    @property
    def draft_seconds(self) -> float | None:
        """One draft step: the typical recent one (:func:`typical`); a pass's
        first step where no other was timed (passes of one draft); None before any."""
        if self.draft_steps:
            return typical(self.draft_steps)
        return typical(self.first_steps) if self.first_steps else None

    @property
    def first_step_seconds(self) -> float | None:
        """A pass's first draft step: the typical recent one; a step before any is timed."""
        return typical(self.first_steps) if self.first_steps else self.draft_seconds

    def draft_cost(self, k: int) -> float:
        """Seconds for the k draft steps of one pass (0 for none)."""
        step = self.draft_seconds
        return 0.0 if step is None else _drafts_cost(k, step, self.first_step_seconds)

    @property
    def verify_seconds(self) -> dict[int, float]:
        """Rows -> the typical recent pass with that many rows (:func:`typical`)."""
        if self._typical_verify is None:
            self._typical_verify = {rows: typical(ts) for rows, ts in self.verify_passes.items() if ts}
        return self._typical_verify

    def pooled(self) -> float:
        """Acceptance over all positions observed (the prior before any)."""
        tried = sum(self.tried)
        return (sum(self.accepted) + self.prior_accept * self.prior_weight) / (tried + self.prior_weight)

    def acceptance(self, i: int) -> float:
        """Estimated P(accept position i | positions before it accepted)."""
        return self.acceptances(i + 1)[i]

    def acceptances(self, k: int) -> list[float]:
        """The estimates for positions 0..k-1: each position's own decayed
        record, leaning where it is thin on the estimate of the position
        before it (position 0 on the pooled rate). A draft that got this far
        agrees with the target, so a later position is at least as likely
        to pass as the one before until its own record says otherwise; a
        position never tried inherits its predecessor's rate."""
        out: list[float] = []
        prior = self.pooled()
        for i in range(k):
            acc = self.accepted[i] if i < len(self.accepted) else 0.0
            tried = self.tried[i] if i < len(self.tried) else 0.0
            prior = (acc + prior * LEAN_WEIGHT) / (tried + LEAN_WEIGHT)
            out.append(prior)
        return out

    def optimistic_acceptances(self, k: int, z: float | None = None, z_untried: float | None = None) -> list[float]:
        """The estimates plus ``z`` standard errors each (a position tried
        rarely or never is given the benefit of the doubt; the margin shrinks
        as its record grows); ``z_untried`` (None: ``z``) for a position not
        tried yet (its decayed count of tries under one)."""
        z = FALLBACK_OPTIMISM if z is None else z
        out = []
        for i, a in enumerate(self.acceptances(k)):
            tried = self.tried[i] if i < len(self.tried) else 0.0
            # The estimate's weight: its own record and what it leans on. A position never tried
            # thus counts as 16 passes, so a fresh process gives drafting up at once where it pays
            # only above ~94% acceptance (then probes it after 16, 32, ... passes). With the prior's
            # weight (4) here instead, the simulator lost 0.01 in two cases (long-lived at 95% after
            # early rejections 0.9726 -> 0.9624; 50% fresh 0.9526 -> 0.9486).
            n = tried + LEAN_WEIGHT
            zi = z if z_untried is None or tried >= 1.0 else z_untried
            out.append(min(1.0, a + zi * math.sqrt(a * (1.0 - a) / n)))
        return out

    def verify_cost(self, rows: int) -> float:
        """Seconds for a target pass of ``rows`` rows.

        Once ``CURVE_MIN_COUNTS`` multi-row counts are timed, a pass of as
        many rows as the fewest of them or more costs the smooth curve through
        their timings (:func:`smooth_rows`), extended past the most rows timed
        along its last step. Before that, and for other row counts: a row count timed at least
        ``TRUSTED`` times costs its typical recent pass (:func:`typical`).
        Otherwise its cost is estimated from the other row counts
        (interpolated between the nearest timed ones, extrapolated with a
        robust slope). A row count timed once or twice between two timed ones
        takes the mean of its own timings and that interpolation
        (``ESTIMATE_WEIGHT``): one draw, low or high, moves it halfway from the
        interpolation, and a timing over ``OUTLIER`` times the interpolation
        (timed cold) is left out, so the policy tries that length again
        instead of avoiding it. Outside them it takes the lower of its own
        timings and the extrapolation.
        """
        curve = self._curve() if rows >= 2 else None
        if curve and rows >= min(curve):
            top = max(curve)
            if rows <= top:
                return curve[rows]
            return curve[top] + max(curve[top] - curve[top - 1], 0.0) * (rows - top)
        own = self.verify_passes.get(rows)
        if own and len(own) >= TRUSTED:
            return self.verify_seconds[rows]
        estimate, interpolated = self._estimate_how(rows)
        if own and interpolated:
            kept = [t for t in own if t <= OUTLIER * estimate]
            return (sum(kept) + ESTIMATE_WEIGHT * estimate) / (len(kept) + ESTIMATE_WEIGHT) if kept else estimate
        if own:  # an extrapolation is a guess: it only lowers the cost, so the count gets timed
            return min(min(own), estimate) if estimate is not None else min(own)
        return estimate if estimate is not None else 0.0

    def _curve(self) -> dict[int, float] | None:
        """:func:`smooth_rows` on the multi-row timings, computed again after
        any timing changes (it is kept with the :attr:`verify_seconds` it was
        computed with, which every change of a target pass's timing replaces:
        a 1-row timing too)."""
        typical_now = self.verify_seconds
        if self._smooth is None or self._smooth[0] is not typical_now:
            multi = {rows: ts for rows, ts in self.verify_passes.items() if rows >= 2}
            self._smooth = (typical_now, smooth_rows(multi))
        return self._smooth[1]

    def _estimate(self, rows: int, seconds: dict[int, float] | None = None) -> float | None:
        """A pass of ``rows`` rows from the other row counts' costs (``seconds``:
        rows -> seconds; default the typical recent ones)."""
        return self._estimate_how(rows, seconds)[0]

    def _estimate_how(self, rows: int, seconds: dict[int, float] | None = None) -> tuple[float | None, bool]:
        """:meth:`_estimate`, and whether it is an interpolation between two timed row counts."""
        seconds = self.verify_seconds if seconds is None else seconds
        pts = sorted((n, t) for n, t in seconds.items() if n != rows)
        if not pts:
            return None, False
        below = [(n, t) for n, t in pts if n < rows]
        above = [(n, t) for n, t in pts if n > rows]
        if below and above:  # between two timed row counts: a straight line
            (n0, t0), (n1, t1) = below[-1], above[0]
            return t0 + (t1 - t0) * (rows - n0) / (n1 - n0), True
        if len(pts) == 1 or not below:
            # one point, or below every timed count: the prior's shape through the nearest one
            n0, t0 = pts[0] if not below else pts[-1]
            one = t0 / (1.0 + PRIOR_ROW_SLOPE * (n0 - 1))
            return one * (1.0 + PRIOR_ROW_SLOPE * (rows - 1)), False
        # above every timed count: the last one plus a robust (Theil-Sen) slope
        slopes = [(tj - ti) / (nj - ni) for i, (ni, ti) in enumerate(pts) for nj, tj in pts[i + 1:]]
        n_hi, t_hi = pts[-1]
        return t_hi + max(statistics.median(slopes), 0.0) * (rows - n_hi), False

    def rate(self, k: int) -> float:
        """Expected tokens per second with k drafts."""
        return expected_tokens(self.acceptances(k), k) / self.pass_cost(k)

    def pass_cost(self, k: int) -> float:
        """Seconds for a pass with k drafts: its draft steps and its target pass."""
        return self.draft_cost(k) + self.verify_cost(k + 1)

    def costs_known(self) -> bool:
        """Whether the costs rest on enough timings to give drafting up on
        them alone: ``TRUSTED`` draft steps, 1-row passes and passes of one
        more row count (what the warm-up at load measures)."""
        return (len(self.draft_steps) >= TRUSTED and len(self.verify_passes.get(1, ())) >= TRUSTED
                and any(rows > 1 and len(ts) >= TRUSTED for rows, ts in self.verify_passes.items()))

    def cannot_pay(self, cap: int) -> bool:
        """Whether the known costs say that even perfect acceptance cannot
        pay for any k in 1..cap (False while the costs are unsure).

        The verdict holds until a draft step or a pass of more than one row is
        timed again (a probe, a drafting pass): target-only passes alone do not
        reopen it, since their fresh timings set against older timings of the
        other kinds would judge a machine that got busier as one where drafting
        pays (the other kinds are timed again by the probes: a recheck)."""
        if cap <= 0 or not self.costs_known():
            return False
        if self._verdict is None:  # the costs of this moment, kept (see above)
            self._verdict = (self.draft_seconds, self.first_step_seconds,
                             {rows: self.verify_cost(rows) for rows in self.verify_passes})
            self._verdict_margin = PAY_MARGIN
        return self._cannot_pay_on(self._verdict, cap, self._verdict_margin)

    def _rows_cost(self, seconds: dict[int, float]):
        """rows -> seconds: the row counts in ``seconds``, the others estimated from them."""
        return lambda rows: seconds[rows] if rows in seconds else self._estimate(rows, seconds)

    def _cannot_pay_on(self, costs: tuple[float, float, dict[int, float]], cap: int,
                       margin: float = PAY_MARGIN) -> bool:
        draft, first, seconds = costs
        return cannot_pay(draft, self._rows_cost(seconds), cap, margin, first_seconds=first)

    def _contradicted(self, cap: int) -> bool:
        """Whether the latest target-only passes, timed dearer than the
        verdict's 1-row pass, would turn the cannot-pay verdict on its other costs."""
        draft, first, seconds = self._verdict
        ones = self.verify_passes.get(1, ())
        if len(ones) < TRUSTED:
            return False
        one = statistics.median(list(ones)[-TRUSTED:])
        return one > seconds.get(1, math.inf) and not self._cannot_pay_on((draft, first, {**seconds, 1: one}), cap,
                                                                          RECHECK_MARGIN)

    @property
    def _recheck_rows(self) -> int:
        """Rows of a recheck's probes: the warm-up's cheapest multi-row pass."""
        return warm_up_rows(self._recheck_cap)[1]

    def _recheck_pairs(self, n: int) -> tuple[float, list[float], list[float]] | None:
        """A recheck's latest ``n`` probes, each against the 1-row pass after
        it: the median of those 1-row passes, and the probes' passes and draft
        steps set at its moment (None where the timings do not pair up)."""
        ones = list(self.verify_passes.get(1, ()))[-n:]
        probes = list(self.verify_passes.get(self._recheck_rows, ()))[-n:]
        steps = list(self.draft_steps)[-n:]
        if n < 1 or not len(ones) == len(probes) == len(steps) == n:
            return None
        one = statistics.median(ones)
        return one, [t * one / o for t, o in zip(probes, ones)], [t * one / o for t, o in zip(steps, ones)]

    @property
    def _recheck_probes_done(self) -> int:
        return RECHECK_PROBES - self._rechecking // 2

    def _recheck_settled(self) -> tuple[float, float | None, dict[int, float]] | None:
        """Within a recheck, after a probe and its 1-row pass: this moment's
        costs on the probes so far (:meth:`_recheck_pairs`; the verdict's
        other row counts scaled as the probes' passes grew dearer or cheaper
        against its own, its first draft step as the draft steps did), where
        they already say that even perfect acceptance gains at most
        ``RECHECK_SETTLED``; None where they do not."""
        pairs = self._recheck_pairs(self._recheck_probes_done)
        if pairs is None:
            return None
        one, probes, steps = pairs
        draft, first, seconds = self._verdict
        rows, probe, step = self._recheck_rows, statistics.median(probes), statistics.median(steps)
        factor = probe / self._rows_cost(seconds)(rows)
        moment = (step, None if first is None else first * step / draft,
                  {**{other: t * factor for other, t in seconds.items()}, 1: one, rows: probe})
        return moment if self._cannot_pay_on(moment, self._recheck_cap, RECHECK_SETTLED) else None

    def _settle(self, moment: tuple[float, float | None, dict[int, float]]) -> None:
        """A recheck ends on ``moment`` (:meth:`_recheck_settled`): the
        verdict stands on it, the probes' own timings are kept as paired, and
        the older timings of every kind but one row are taken to this moment
        (a later cost probe reopens the verdict on them)."""
        n, rows = self._recheck_probes_done, self._recheck_rows
        _, probes, steps = self._recheck_pairs(n)
        draft, _, seconds = self._verdict
        for window in (self.verify_passes[rows], self.draft_steps):
            for _ in range(n):
                window.pop()
        self._scale_older(moment[2][rows] / self._rows_cost(seconds)(rows), moment[0] / draft, fresh_rows=(1,),
                          fresh_steps=False)
        self.verify_passes[rows].extend(probes)
        self.draft_steps.extend(steps)
        self._typical_verify = None
        self._verdict, self._rechecking = moment, 0
        self._warm_step = self._warm_one_row = None  # every cost taken at this moment

    def _scale_older(self, rows_factor: float, step_factor: float, *, fresh_rows: tuple[int, ...],
                     fresh_steps: bool) -> None:
        """Older timings taken to a recheck's moment: those of every row
        count but ``fresh_rows`` times ``rows_factor``, a pass's first draft
        step's (and the draft steps', unless ``fresh_steps``) times ``step_factor``."""
        for rows, window in self.verify_passes.items():
            if rows not in fresh_rows:
                self.verify_passes[rows] = deque((t * rows_factor for t in window), maxlen=window.maxlen)
        steps = (("first_steps",) if fresh_steps else ("first_steps", "draft_steps"))
        for name in steps:
            window = getattr(self, name)
            setattr(self, name, deque((t * step_factor for t in window), maxlen=window.maxlen))
        self._typical_verify = None

    def _recheck_done(self) -> None:
        """A recheck's end, its probes ``rows`` (:attr:`_recheck_rows`) rows
        each: every estimate, the verdict's and the choice's, is taken at this moment. The draft steps,
        1-row and ``rows``-row passes keep only their latest ``TRUSTED``
        timings (taken together); the older timings of other row counts are
        scaled as the ``rows``-row passes grew dearer or cheaper against the
        verdict's, and a pass's first draft step as the draft steps did. Each
        probe's timings are taken against the 1-row pass after it (set at the
        median 1-row pass's moment), and the verdict turns only by
        ``REOPEN_MARGIN``."""
        draft, first, seconds = self._verdict
        rows = self._recheck_rows
        for window in (self.draft_steps, self.verify_passes.get(1), self.verify_passes.get(rows)):
            while window is not None and len(window) > TRUSTED:
                window.popleft()
        # each probe's timings against its own 1-row pass's, set at the recheck's typical 1-row moment
        pairs = self._recheck_pairs(len(self.verify_passes[1]))
        if pairs is not None:
            _, probes, steps = pairs
            for window, paired in ((self.verify_passes[rows], probes), (self.draft_steps, steps)):
                window.clear()
                window.extend(paired)
        self._typical_verify = None
        self._scale_older(self.verify_seconds[rows] / self._rows_cost(seconds)(rows), self.draft_seconds / draft,
                          fresh_rows=(1, rows), fresh_steps=True)
        self._verdict = None
        self._warm_step = self._warm_one_row = None  # every cost taken at this moment
        # the verdict on this moment's costs, turned only by REOPEN_MARGIN; where it turned, decoding times the
        # 1-row pass again (CONFIRM)
        self._confirming = 0 if self.cannot_pay(self._recheck_cap) else CONFIRM
        self._verdict_margin = REOPEN_MARGIN

    def verdict(self, cap: int) -> str:
        """The measured costs' verdict in words (:func:`cost_verdict`): on the
        costs :meth:`cannot_pay` judges by where they are known, so the words
        and the policy's choice agree."""
        if self.draft_seconds is None or 1 not in self.verify_passes:
            return "drafting not measured yet"
        self.cannot_pay(cap)  # keeps the costs of this moment where they are known
        if self._verdict is None:
            return cost_verdict(self.draft_seconds, self.verify_cost, cap, first_seconds=self.first_step_seconds)
        draft, first, seconds = self._verdict
        return cost_verdict(draft, self._rows_cost(seconds), cap, first_seconds=first)

    # -- the choice -------------------------------------------------------

    def choose(self, cap: int, *, minimum: int = 0) -> int:
        """The number of tokens to draft in the next pass (minimum..cap;
        a cap below the minimum wins)."""
        return max(self._choose(cap, minimum), min(minimum, cap))

    def drafting(self, cap: int = DEFAULT_DRAFT_MAX) -> bool:
        """Whether the next passes are likely to draft (False while the
        policy decodes target-only: the draft model need not be fed then)."""
        if self.cannot_pay(cap):
            return False
        if self.draft_seconds is None or not self.verify_passes or cap <= 0:
            return True
        return self._rates(cap)[1] or not self._sure(cap)

    def _rates(self, cap: int) -> tuple[list[float], bool]:
        """Expected tokens per second of k = 0..cap (the choice's estimates),
        and whether drafting may pay: some k >= 1 beats target-only at
        acceptance rates ``FALLBACK_OPTIMISM`` standard errors above the
        estimates (a few early rejections do not end drafting)."""
        # a position's estimate depends only on those before it: the cap's list serves every k
        accept = self.optimistic_acceptances(cap, OPTIMISM, UNTRIED_OPTIMISM)
        costs = [self.pass_cost(k) for k in range(cap + 1)]  # once per choice, for both sets of estimates
        rates = [expected_tokens(accept, k) / costs[k] for k in range(cap + 1)]
        if max(rates[1:]) > rates[0]:
            return rates, True
        z = RESUME_OPTIMISM if self.gave_up else FALLBACK_OPTIMISM
        return rates, _drafting_pays(self.optimistic_acceptances(cap, z), costs)

    def _sure(self, cap: int) -> bool:
        """Enough evidence to give drafting up on the rates alone:
        ``MIN_EVIDENCE`` drafting passes. (Not the warm-up's costs and prior
        rate alone: on a 2-core VM whose warm-up timed a 9-row pass at 54.6 ms
        and a draft step at 11.8, where the chat pair's passes took 46 and
        10.4, a prior of 0.872 from a check that missed 2 of its first 16
        tokens, where the text kept 97%, gave drafting up at the first or
        second pass in 4 of 8 runs: benchmarks/RESULTS.md, "Short drafts' real
        cost".)"""
        return self.drafting_passes >= MIN_EVIDENCE

    def take_probe(self) -> int:
        """Rows of a padded target-only pass to time now (0: none): asked for
        now and then while drafting cannot pay, to notice a machine that
        changed. The engine times one draft step with it
        (:meth:`observe_probe`)."""
        rows, self._probe_rows = self._probe_rows, 0
        return rows

    def new_sequence(self, n_prompt: int, *, draft_fed: bool) -> None:
        """A generation starts after ``n_prompt`` prompt tokens, which the
        draft model was fed or not (it is not while the policy decodes
        target-only: :meth:`drafting`)."""
        self.behind = 0 if draft_fed else n_prompt  # the draft catches up with this sequence only
        self._last_k, self._settling = -1, 0  # the prompt's passes came between: nothing to settle

    def _catch_up_affordable(self) -> bool:
        """Whether a probe now may pay the draft's catch-up: at most
        ``PROBE_BUDGET`` of the target-only time since the last probe. In a
        long generation the catch-up grows as fast as that time, so where it
        is dear a probe waits for the next prompt (a short catch-up)."""
        if not self.catch_up_tokens:
            return True  # not measured yet: the first probe measures it
        per_token = self.catch_up_seconds / self.catch_up_tokens
        return per_token * self.behind <= PROBE_BUDGET * self.verify_cost(1) * self.since_probe

    def _choose(self, cap: int, minimum: int = 0) -> int:
        if cap <= 0:
            return 0
        if self.draft_seconds is None or not self.verify_passes:
            return min(cap, START_K)
        self.passes += 1
        self.since_probe += 1
        if self._settling and minimum <= self._last_k <= cap and not (self._last_k and self.cannot_pay(cap)):
            # where a switch is dear, a new draft length (an exploration's, a close call's) is kept until a pass
            # of it is settled: only that one times its cost (SETTLED); not past a cannot-pay verdict
            self._settling -= 1
            return self._last_k
        self._settling = 0
        best = self._choose_anew(cap, minimum)
        # (not the first choice, nothing timed yet; nor one the cap made, a call's last tokens)
        if best != self._last_k and 0 <= self._last_k <= cap and self.switch_dear:
            self._settling = SETTLED - 1
        self._last_k = best
        return best

    def _choose_anew(self, cap: int, minimum: int) -> int:
        if self.cannot_pay(cap):
            # Even perfect acceptance cannot pay: target-only, and the costs
            # measured again ever more rarely (up to a bound), in case the machine changes,
            # or at once where target-only timings say the verdict would turn (a recheck).
            if not self._rechecking and self.passes - self._recheck_at >= self._recheck_gap \
                    and self._contradicted(cap):
                self._rechecking, self._recheck_at, self._recheck_cap = 2 * RECHECK_PROBES, self.passes, cap
                self.rechecks += 1
            if self._rechecking:
                if self._rechecking % 2 == 0:
                    self._probe_rows = self._recheck_rows
            elif self.since_probe >= self.cost_probe_gap:
                self.since_probe = 0
                self.cost_probe_gap = min(2 * self.cost_probe_gap, MAX_COST_PROBE_GAP)
                self._probe_rows = cap + 1
            self._confirming = 0
            return 0
        if minimum == 0 and self._hinges_on_warm_one_row(cap):
            return 0  # target-only passes time what the choice hinges on (HINGE)
        if (self._confirming and minimum == 0 and not self.switch_dear
                and self.passes - max(self.last_timed.get(1, 0), self._close_call_at) >= CONFIRM_EVERY):
            self._close_call_at = self.passes  # a turned verdict: decoding times the 1-row pass (CONFIRM)
            return 0
        rates, may_pay = self._rates(cap)
        best = _best_drafting(rates) if may_pay else 0
        if best == 0 and not self._sure(cap):
            # too little evidence to give drafting up: keep measuring at the best k >= 1
            best = _best_drafting(rates)
        elif best == 0:
            self.gave_up = True
            if self.since_probe >= self.probe_gap and self._catch_up_affordable():
                # Try drafting again, at the best k >= 1: the acceptance may have changed.
                self.since_probe = 0
                self.probe_gap = min(2 * self.probe_gap, MAX_PROBE_GAP)
                best = _best_drafting(rates)
        elif (minimum == 0 and best < cap and rates[best] < (1 + CLOSE_CALL) * rates[0] and not self.switch_dear
              and self.passes - max(self.last_timed.get(1, 0), self._close_call_at) >= CLOSE_CALL_EVERY):
            # a close call (not one the cap made: a call's last tokens): time target-only now, as
            # drafting is timed at every pass (at most once in CLOSE_CALL_EVERY passes, also where
            # the engine verifies prompt-lookup drafts instead, and no 1-row pass is timed)
            self._close_call_at = self.passes
            best = 0
        else:
            self.gave_up = False
            self.probe_gap = EXPLORE_EVERY
            self.cost_probe_gap = COST_PROBE_GAP
            if (self.switch_dear and 1 <= self._last_k <= cap and self._last_k != best
                    and rates[self._last_k] >= (1 - STICKY) * rates[best]):
                best = self._last_k  # where a switch is dear, a draft length is kept while it is nearly as good
            if self.since_probe >= EXPLORE_EVERY * (SWITCH_EXPLORE if self.switch_dear else 1):
                # Probe now and then, so the estimates stay fresh: a neighbour
                # of the choice (above, below), or the draft length timed
                # longest ago (a cost measured once, cold, must not stick).
                self.since_probe = 0
                turn = (self.passes // EXPLORE_EVERY) % 3
                if turn == 0:
                    best = min(best + 1, cap)
                elif turn == 1:
                    best = best - 1
                else:
                    # (k = 0 among them: target-only's cost is what every choice is weighed against)
                    best = min(range(cap + 1), key=lambda k: self.last_timed.get(k + 1, -1))
        return best

    def _hinges_on_warm_one_row(self, cap: int) -> bool:
        """Whether the warm-up's 1-row timings are unjudged but suspect (its
        draft steps were off: ``SUSPECT``) and the choice hinges on them: even
        perfect acceptance would not pay if a 1-row pass cost ``HINGE`` of its
        estimate. Then target-only passes time it (``CONTRADICTED``)."""
        if self._warm_one_row is None or not self._warm_off or self.draft_seconds is None:
            return False
        seconds = {rows: self.verify_cost(rows) for rows in self.verify_passes}
        seconds[1] *= HINGE
        return self._cannot_pay_on((self.draft_seconds, self.first_step_seconds, seconds), cap)

    def _judge_warm_up(self, n_drafted: int, draft_seconds: float, verify_seconds: float | None) -> None:
        """The first drafting pass that timed draft steps (a mean of its steps
        after its first, after the warm-up's timings, the oldest): where it
        took over 1 / ``SUSPECT`` of what the warm-up's timings say it would
        (its steps at the warm-up's median step, its target pass interpolated
        between the warm-up's row counts), the warm-up's draft steps are
        scaled to this pass's, and its 1-row timings are suspect too
        (:meth:`_hinges_on_warm_one_row`)."""
        steps = list(self.draft_steps)
        older, decoded = steps[:self._undecoded_steps], steps[self._undecoded_steps:]
        if not decoded:
            return
        step = self._warm_step
        rows = sorted(self._warm_rows.items())
        verify = float(np.interp(n_drafted + 1, [r for r, _ in rows], [t for _, t in rows]))
        # (a target pass that times no cost, SETTLED, is taken at the warm-up's word: the draft steps are judged)
        predicted = n_drafted * step + verify
        if SUSPECT * (draft_seconds + (verify if verify_seconds is None else verify_seconds)) > predicted:
            factor = statistics.median(decoded) / step
            self.draft_steps.clear()
            self.draft_steps.extend([t * factor for t in older] + decoded)
            self._verdict = None
            self._warm_off = True
        self._warm_step = None

    def _judge_warm_one_row(self, seconds: float) -> None:
        """A target-only pass of decoding (not a recheck's) took ``seconds``:
        once ``TRUSTED`` are timed, the 1-row timings older than theirs (the
        warm-up's, a remembered one) leave if their median is under
        ``CONTRADICTED`` of the warm-up's."""
        self._decoded_one_row.append(seconds)
        if len(self._decoded_one_row) < TRUSTED:
            return
        if statistics.median(self._decoded_one_row) < CONTRADICTED * self._warm_one_row:
            ones = self.verify_passes[1]
            while len(ones) > len(self._decoded_one_row):
                ones.popleft()
            self._typical_verify = None
            self._verdict = None
        self._warm_one_row = None

    def observe(self, n_drafted: int, n_accepted: int, draft_seconds: float, verify_seconds: float,
                first_step: float | None = None, run: int | None = None) -> None:
        """Learn from one finished pass.

        Args:
            n_drafted, n_accepted: the pass's draft length and how much was kept.
            draft_seconds: time spent in the draft steps (a catch-up after
                target-only passes is told apart, :meth:`observe_catch_up`).
            verify_seconds: time of the target pass and the acceptance walk.
            first_step: of ``draft_seconds``, the first step's (None: not
                timed apart, and every step counts the same).
            run: target passes of this one's shape in a row, itself included
                (None: not counted; :data:`SETTLED`).
        """
        # (on a GPU, a pass right after another shape times no cost where that is dear: SETTLED)
        timed = run is None or self._pass_counts(n_drafted + 1, run, verify_seconds)
        if n_drafted:
            # Every record fades at each drafting pass, also of positions not
            # reached: an old verdict on a position is forgotten in time.
            for i in range(len(self.tried)):
                self.tried[i] *= DECAY
                self.accepted[i] *= DECAY
            # Positions 0..n_accepted were tried (the last of them rejected unless all passed).
            for i in range(min(n_accepted + 1, n_drafted)):
                while len(self.tried) <= i:
                    self.tried.append(0.0)
                    self.accepted.append(0.0)
                self.tried[i] += 1.0
                self.accepted[i] += 1.0 if i < n_accepted else 0.0
            self.drafting_passes += 1
            if first_step is None:
                if draft_seconds > 0:
                    self.draft_steps.append(draft_seconds / n_drafted)
            elif first_step > 0:
                self.first_steps.append(first_step)
                if n_drafted > 1 and draft_seconds > first_step:
                    self.draft_steps.append((draft_seconds - first_step) / (n_drafted - 1))
            if self._warm_step is not None and self._warm_rows:
                self._judge_warm_up(n_drafted, draft_seconds, verify_seconds if timed else None)
            self._verdict = None
            # a pass that drafts within a recheck (a minimum draft length, another cap) ends it: its own
            # timings reopen the verdict, and the recheck's probes and 1-row passes no longer pair up
            self._rechecking = self._probe_rows = 0
            self.behind = 0
        else:
            self.behind += 1
        if not timed:
            return
        self.observe_verify(n_drafted + 1, verify_seconds)
        if not n_drafted and self._warm_one_row is not None and not self._rechecking:
            self._judge_warm_one_row(verify_seconds)
        if not n_drafted and self._confirming and not self._rechecking:
            self._confirming -= 1  # a turned verdict's 1-row pass of decoding (CONFIRM)
        if not n_drafted and self._rechecking % 2 == 1:  # a recheck's 1-row pass, after its probe
            self._rechecking -= 1
            settled = self._recheck_settled() if self._rechecking else None
            if settled is not None:  # the probes so far confirm the verdict: it stands on their costs
                self._settle(settled)
            elif not self._rechecking:
                self._recheck_done()
            if not self._rechecking and self.cannot_pay(self._recheck_cap):  # a recheck that kept the verdict
                self._recheck_gap = min(2 * self._recheck_gap, COST_PROBE_GAP)

    def _pass_counts(self, rows: int, run: int, seconds: float) -> bool:
        """A target pass of ``rows`` rows, the ``run``-th of its shape in a
        row, took ``seconds``: whether it times its row count's cost (all but a
        switch where a 1-row switch costs more than a settled 1-row pass:
        :data:`SETTLED`, :data:`SWITCH_DEAR`)."""
        if rows == 1:
            (self._settled_one_row if run >= SETTLED else self._switch_one_row).append(seconds)
            self._judge_switch()
        return run >= SETTLED or not self.switch_dear

    def _judge_switch(self) -> None:
        """:attr:`switch_dear` on the latest 1-row timings of both kinds."""
        self.switch_dear = (len(self._switch_one_row) >= TRUSTED and len(self._settled_one_row) >= TRUSTED
                            and statistics.median(self._switch_one_row)
                            > SWITCH_DEAR * statistics.median(self._settled_one_row))

    def observe_verify(self, rows: int, seconds: float, *, reopen: bool = True, run: int | None = None) -> None:
        """One target pass of ``rows`` rows took ``seconds``. ``reopen=False``:
        a pass that timed no draft step (prompt-lookup drafts) keeps a
        cannot-pay verdict, as target-only passes do (see :meth:`cannot_pay`).
        ``run``: as :meth:`observe`'s (a switch may time nothing)."""
        if run is not None and not self._pass_counts(rows, run, seconds):
            return
        window = ONE_ROW_WINDOW if rows == 1 else VERIFY_WINDOW
        self.verify_passes.setdefault(rows, deque(maxlen=window)).append(seconds)
        if rows == 1:
            self._one_row_at.append(self.passes)
        # 1-row timings older than ONE_ROW_AGE passes (self.passes: choices made) leave; the latest VERIFY_WINDOW stay
        ones = self.verify_passes.get(1)
        while ones and len(ones) > VERIFY_WINDOW and self.passes - self._one_row_at[-len(ones)] > ONE_ROW_AGE:
            ones.popleft()
        self._typical_verify = None
        self.last_timed[rows] = self.passes
        if rows > 1 and reopen:
            self._verdict = None

    def observe_probe(self, rows: int, verify_seconds: float, draft_step_seconds: float | None) -> None:
        """A padded target-only pass of ``rows`` rows (:meth:`take_probe`)
        and one draft step, timed."""
        self.behind += 1
        self.probes += 1
        self._warm_step = self._warm_one_row = None  # the costs are timed again: the warm-up's are not judged after
        # a recheck keeps the verdict until its last probe, then takes every cost at this moment
        rechecking = self._rechecking > 0
        self.observe_verify(rows, verify_seconds, reopen=not rechecking)
        if draft_step_seconds is not None and draft_step_seconds > 0:
            self.draft_steps.append(draft_step_seconds)
            if not rechecking:
                self._verdict = None
        if rechecking and self._rechecking % 2 == 0:
            self._rechecking -= 1  # its 1-row pass comes next

    def observe_catch_up(self, seconds: float, n_tokens: int) -> None:
        """The draft model evaluated ``n_tokens`` it had skipped (target-only
        passes, a prompt not fed to it) before drafting: time paid by that
        pass, told apart from the draft steps' cost."""
        self.catch_up_seconds += seconds
        self.catch_up_tokens += n_tokens

    def observe_agreement(self, agreed: int, n: int) -> None:
        """The warm-up's check: of ``n`` tokens the draft wrote greedily,
        ``agreed`` were the target's greedy choice too. The prior rate becomes
        their mean, each token weighing ``WARM_UP_AGREEMENT_WEIGHT`` against
        ``PRIOR_ACCEPT`` weighing ``PRIOR_WEIGHT``; in the pooled rate it then
        weighs ``PRIOR_WEIGHT`` + ``CHECKED_TOKEN_WEIGHT`` x ``n`` positions."""
        if n > 0:
            w = WARM_UP_AGREEMENT_WEIGHT
            self.prior_accept = (w * agreed + PRIOR_ACCEPT * PRIOR_WEIGHT) / (w * n + PRIOR_WEIGHT)
            self.prior_weight = PRIOR_WEIGHT + CHECKED_TOKEN_WEIGHT * n

    def observe_warm_up(self, draft_steps, verify: dict[int, list[float]], switch_one_row=()) -> None:
        """Timings taken at load: draft steps, and rows -> passes (a 1-row
        pass settled, the third in a row), and 1-row passes right after a pass
        of another shape (:data:`SETTLED`)."""
        switches = [t for t in switch_one_row if t > 0]
        self._switch_one_row.clear()
        self._settled_one_row.clear()
        if switches:
            self._switch_one_row.extend(switches)
            self._settled_one_row.extend(t for t in verify.get(1, ()) if t > 0)
        self._judge_switch()
        self.draft_steps.extend(t for t in draft_steps if t > 0)
        self._verdict = None
        for rows, ts in verify.items():
            for t in ts:
                if t > 0:
                    self.observe_verify(int(rows), float(t))
        steps = [t for t in draft_steps if t > 0]
        self._warm_step = statistics.median(steps) if steps else None
        self._warm_rows = {int(rows): statistics.median(kept) for rows, ts in verify.items()
                           if (kept := [t for t in ts if t > 0])}
        self._warm_one_row = self._warm_rows.get(1)
        self._undecoded_steps = len(self.draft_steps)
        self._decoded_one_row = []
        self._warm_off = False
        self.warm_up_costs = {f"{rows}_row_pass": t for rows, t in self._warm_rows.items()} | (
            {"draft_step": self._warm_step} if steps else {}) | (
            {"1_row_pass_after_another_shape": statistics.median(switches)} if switches else {})

    def describe(self, cap: int) -> dict:
        """What the policy stands on after a generation, for ``--json`` and the
        benchmarks' saved details: the warm-up's costs and prior rate, the costs'
        verdict, and whether drafting was given up (on costs or on acceptance)."""
        return {"prior_accept": self.prior_accept, "warm_up_ms": {n: 1000 * t for n, t in self.warm_up_costs.items()},
                "cannot_pay": self.cannot_pay(cap), "gave_up": self.gave_up, "rechecks": self.rechecks,
                "probes": self.probes, "drafting_passes": self.drafting_passes, "warm_up_off": self._warm_off,
                "switch_dear": self.switch_dear, "verdict": self.verdict(cap)}

    # -- carried between processes ----------------------------------------

    def snapshot(self) -> dict:
        """What a later process may start from: the costs and the
        acceptance record (scaled to weigh as ``SAVED_WEIGHT`` passes)."""
        tried = max(self.tried, default=0.0)
        scale = min(1.0, SAVED_WEIGHT / tried) if tried else 0.0
        return {
            "draft_seconds": self.draft_seconds,
            "draft_first_seconds": self.first_step_seconds if self.first_steps else None,
            "verify_seconds": {str(rows): t for rows, t in self.verify_seconds.items()},
            "tried": [t * scale for t in self.tried],
            "accepted": [a * scale for a in self.accepted],
        }

    def seed(self, saved: dict) -> None:
        """Start from timings and acceptance measured before (a
        :meth:`snapshot`, or load-time timings): each saved cost counts as
        one observation, so real passes soon outweigh it."""
        self._verdict = None
        draft = saved.get("draft_seconds")
        if isinstance(draft, (int, float)) and draft > 0 and not self.draft_steps:
            self.draft_steps.append(float(draft))
        first = saved.get("draft_first_seconds")
        if isinstance(first, (int, float)) and first > 0 and not self.first_steps:
            self.first_steps.append(float(first))
        for rows, t in (saved.get("verify_seconds") or {}).items():
            if isinstance(t, (int, float)) and t > 0 and int(rows) not in self.verify_passes:
                self.observe_verify(int(rows), float(t))
        tried, accepted = saved.get("tried") or [], saved.get("accepted") or []
        if not self.tried and len(tried) == len(accepted):
            self.tried = [float(t) for t in tried]
            self.accepted = [float(a) for a in accepted]
