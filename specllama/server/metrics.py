"""Prometheus counters of the generation requests, in the text format.

Every count comes from a request's :class:`~specllama.stats.GenerationStats`
(the record its response was made from), so the counters agree with the
responses exactly: ``generated_tokens`` adds up ``usage.completion_tokens``,
``draft_tokens`` adds up ``speculative.n_drafted``, and per draft position
``accepted / tried`` is ``speculative.acceptance_by_position``.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Callable

from ..stats import GenerationStats

PREFIX = "specllama_"
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

# name -> (type, help); the order of the exposition
_COUNTERS = {
    "prompt_tokens_total": "Prompt tokens of the requests.",
    "prompt_tokens_evaluated_total": "Prompt tokens the target evaluated (the rest came from its KV cache).",
    "generated_tokens_total": "Tokens generated (usage.completion_tokens).",
    "draft_tokens_total": "Draft tokens proposed.",
    "draft_tokens_accepted_total": "Draft tokens the target accepted.",
    "target_passes_total": "Target forward passes while decoding.",
    "decode_seconds_total": "Seconds spent decoding (prompt evaluation excluded).",
}


class Metrics:
    """Thread-safe counters; :meth:`render` writes them out.

    Args:
        queue_length: the number of requests waiting now.
        running: the generations running now (at most the slots).
        slots: how many generations may run at once (``-np``).
        batches: (target passes, their rows) of the parallel slots so far.
    """

    def __init__(self, *, queue_length: Callable[[], int] = lambda: 0, running: Callable[[], int] = lambda: 0,
                 slots: int = 1, batches: Callable[[], tuple[int, int]] | None = None) -> None:
        self._lock = threading.Lock()
        self._queue_length, self._running = queue_length, running
        self._slots, self._batches = slots, batches
        self._requests: dict[tuple[str, str], int] = defaultdict(int)
        self._totals: dict[str, float] = {name: 0 for name in _COUNTERS}
        self._tried: list[int] = []
        self._accepted: list[int] = []
        self._durations: dict[str, _Histogram] = {}

    def record(self, endpoint: str, outcome: str, stats: GenerationStats | None = None,
               seconds: float | None = None) -> None:
        """Count one request: its outcome ("ok", "cancelled", "invalid",
        "rejected", "shutdown", "error"), its tokens, and (if given) its
        duration from arrival to the end of its generation."""
        with self._lock:
            self._requests[(endpoint, outcome)] += 1
            if stats is not None:
                t = self._totals
                t["prompt_tokens_total"] += stats.n_prompt_tokens
                t["prompt_tokens_evaluated_total"] += stats.n_prompt_evaluated
                t["generated_tokens_total"] += stats.n_tokens
                t["draft_tokens_total"] += stats.n_drafted
                t["draft_tokens_accepted_total"] += stats.n_accepted
                t["target_passes_total"] += stats.n_target_passes
                t["decode_seconds_total"] += stats.seconds
                for i, (tried, accepted) in enumerate(zip(stats.tried_at, stats.accepted_at)):
                    if i == len(self._tried):
                        self._tried.append(0)
                        self._accepted.append(0)
                    self._tried[i] += tried
                    self._accepted[i] += accepted
            if seconds is not None:
                self._durations.setdefault(endpoint, _Histogram()).observe(seconds)

    def render(self) -> str:
        """The Prometheus text exposition (version 0.0.4)."""
        with self._lock:
            lines: list[str] = []

            def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
                lines.append(f"# HELP {PREFIX}{name} {help_text}")
                lines.append(f"# TYPE {PREFIX}{name} {kind}")
                lines.extend(f"{PREFIX}{name}{labels} {_number(v)}" for labels, v in samples)

            family("requests_total", "counter", "Generation requests, by endpoint and outcome.",
                   [(_labels(endpoint=e, outcome=o), n) for (e, o), n in sorted(self._requests.items())])
            for name, help_text in _COUNTERS.items():
                family(name, "counter", help_text, [("", self._totals[name])])
            family("draft_position_tried_total", "counter",
                   "Target passes that reached each draft position (0 = the first draft token).",
                   [(_labels(position=i), n) for i, n in enumerate(self._tried)])
            family("draft_position_accepted_total", "counter", "Draft tokens accepted at each draft position.",
                   [(_labels(position=i), n) for i, n in enumerate(self._accepted)])
            family("queue_length", "gauge", "Requests waiting for the model.", [("", self._queue_length())])
            family("requests_running", "gauge", "Generations running now (busy slots).", [("", self._running())])
            family("slots", "gauge", "Generations that may run at once (-np).", [("", self._slots)])
            if self._batches is not None:
                passes, rows = self._batches()
                family("batch_target_passes_total", "counter", "Target passes of the parallel slots, each one "
                       "llama_decode for every running slot.", [("", passes)])
                family("batch_target_rows_total", "counter", "Logits rows of those passes (per pass: rows per pass).",
                       [("", rows)])
            name = "request_duration_seconds"
            lines.append(f"# HELP {PREFIX}{name} Time from a completed request's arrival to the end of its generation.")
            lines.append(f"# TYPE {PREFIX}{name} histogram")
            for endpoint, h in sorted(self._durations.items()):
                for le, n in zip(DURATION_BUCKETS, h.buckets):
                    lines.append(f"{PREFIX}{name}_bucket{_labels(endpoint=endpoint, le=_number(le))} {n}")
                lines.append(f"{PREFIX}{name}_bucket{_labels(endpoint=endpoint, le='+Inf')} {h.count}")
                lines.append(f"{PREFIX}{name}_sum{_labels(endpoint=endpoint)} {_number(h.sum)}")
                lines.append(f"{PREFIX}{name}_count{_labels(endpoint=endpoint)} {h.count}")
            return "\n".join(lines) + "\n"


class _Histogram:
    """Cumulative bucket counts, sum and count of observations."""

    def __init__(self) -> None:
        self.buckets = [0] * len(DURATION_BUCKETS)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        for i, le in enumerate(DURATION_BUCKETS):
            self.buckets[i] += v <= le
        self.sum += v
        self.count += 1


def _labels(**labels: object) -> str:
    inner = ",".join(f'{k}="{str(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))
