"""Parallel slots: several generations of one model pair at once, their passes batched.

One thread does all of llama.cpp's work (its OpenMP pool belongs to the thread
that calls it; see :mod:`specllama.server.worker`): it opens the pair, then runs
each generation in a greenlet of its own, a slot. A slot's model calls (``eval``
of its sequence's view, :meth:`~specllama.backend.LlamaModel.sequence`) switch
back to the scheduler with the request. Once every running slot waits on one,
the scheduler decodes them together: the draft model's first (each drafting
slot's next draft step, in one ``llama_decode``), and when only target requests
are left, one target ``llama_decode`` with every slot's rows. A long request (a
new prompt) goes in pieces of at most ``PIECE`` tokens beside the others, so
running streams keep flowing while it loads.

Exactness per slot is that of one sequence: each slot's engine has its own
random stream and its own policy state (its k is fixed from past passes before
its drafts are drawn), and its rows are its own sequence's; what another slot
draws never reaches its tokens (``tests/test_slots.py`` checks the joint law).

Callers, from any thread: :meth:`Slots.run` takes a function that makes a
generation's iterator (it runs in the slot, where :meth:`Slots.engine_here` is
that slot's engine) and returns a :class:`Job`, an iterator of its items that
waits for them; closing it stops the generation after its current pass.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Iterator, Sequence

import greenlet
import numpy as np

from .engine import PREFILL_PIECE
from .errors import ContextFull
from .policy import Batch, BatchPolicy
from .prefix import common_prefix_len

log = logging.getLogger("specllama")

PIECE = 256  # most tokens of one long request (a prompt) in a batch that other slots' rows share
_END = object()


class Job:
    """One generation handed to the slots: an iterator of what it yields,
    read from any thread (it waits for each item)."""

    def __init__(self, slots: "Slots", make: Callable[[], Iterator[Any]], prompt: Sequence[int]) -> None:
        self._slots, self.make, self.prompt = slots, make, list(prompt)
        self._items: queue.Queue = queue.Queue()
        self.cancelled = False
        self.slot: int | None = None
        #: the generation's statistics record (the latest chunk's), for a server's metrics
        self.stats = None
        self._ended = False

    def __iter__(self) -> "Job":
        return self

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        item = self._items.get()
        if item is _END:
            self._ended = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._ended = True
            raise item.error
        return item

    def close(self) -> None:
        """Stop the generation (after its current pass; at once if it waits for a slot)."""
        if not self._ended:
            self._slots.cancel(self)

    # -- the scheduler's side
    def _put(self, item: Any) -> None:
        self._items.put(item)


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Request:
    """A model call of a slot: ``tokens`` appended to its view, logits for the last ``n_logits``."""

    def __init__(self, view, tokens: list[int], n_logits: int, copy: bool) -> None:
        self.view, self.tokens, self.n_logits, self.copy = view, tokens, n_logits, copy
        self.done = 0  # tokens decoded so far (a long request goes in pieces)


class _Slot:
    def __init__(self, index: int, engine) -> None:
        self.index, self.engine = index, engine
        self.job: Job | None = None
        self.greenlet: greenlet.greenlet | None = None
        self.request: _Request | None = None
        self.ready = False  # a value waits to be sent in
        self.value: Any = None
        self.started = 0.0
        self.n_passes = 0
        self.last_used = 0.0


class Slots:
    """``n`` slots over one pair, opened and run in a thread of their own.

    Args:
        open_engine: opens the pair (its models made with ``n_seq_max=n``),
            called in the slots' thread; its warm-up runs there too.
        n: how many generations run at once; more wait in arrival order.
    """

    def __init__(self, open_engine: Callable[[], Any], n: int) -> None:
        self.n = n
        self.engine: Any = None
        self._slots: list[_Slot] = []
        self._waiting: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._opened = threading.Event()
        self._open_error: BaseException | None = None
        self._main: greenlet.greenlet | None = None
        self._by_greenlet: dict[greenlet.greenlet, _Slot] = {}
        #: what the slots' engines share: the running sequences, the batch's draft-length policy, the step
        self.batch: Batch | None = None
        self._step_end: float | None = None  # the latest target pass's end, while slots run
        self._draft_decodes = self._draft_tokens = 0  # draft decodes since, and their tokens
        #: llama_decode calls of the target, and their logits rows, so far
        self.n_target_passes = 0
        self.n_target_rows = 0
        self._thread = threading.Thread(target=self._run, args=(open_engine,), name="specllama-slots", daemon=True)
        self._thread.start()
        self._opened.wait()
        if self._open_error is not None:
            raise self._open_error

    # -- any thread --------------------------------------------------------------------

    def run(self, make: Callable[[], Iterator[Any]], prompt: Sequence[int] = ()) -> Job:
        """Queue a generation; it starts in the idle slot whose cache shares
        the longest prefix with ``prompt`` (llama-server's prompt similarity)."""
        job = Job(self, make, prompt)
        with self._cond:
            if self._stopping:
                raise RuntimeError("the slots are closed")
            self._waiting.append(job)
            self._cond.notify_all()
        return job

    def cancel(self, job: Job) -> None:
        with self._cond:
            job.cancelled = True
            if job in self._waiting:
                self._waiting.remove(job)
                job._put(_END)

    def engine_here(self):
        """The engine of the slot this code runs in (inside a job's ``make``)."""
        return self._by_greenlet[greenlet.getcurrent()].engine

    def record_stats(self, stats) -> None:
        """The running slot's statistics record, kept on its job."""
        slot = self._by_greenlet.get(greenlet.getcurrent())
        if slot is not None and slot.job is not None:
            slot.job.stats = stats

    @property
    def busy(self) -> int:
        return sum(s.job is not None for s in self._slots)

    @property
    def queue_length(self) -> int:
        return len(self._waiting)

    def describe(self) -> list[dict]:
        """Each slot as llama-server's ``GET /slots`` shows it (the fields that apply)."""
        now = time.perf_counter()
        out = []
        for s in self._slots:
            target = s.engine.target
            out.append({"id": s.index, "id_task": -1 if s.job is None else id(s.job) % 1_000_000,
                        "n_ctx": target.n_ctx, "is_processing": s.job is not None,
                        "n_cached": len(target.tokens), "n_passes": s.n_passes,
                        "seconds": round(now - s.started, 3) if s.job is not None else 0.0,
                        "speculative": s.engine.drafter is not None})
        return out

    def close(self) -> None:
        """End the waiting jobs, the running ones after their current pass; then close the pair."""
        with self._cond:
            self._stopping = True
            waiting, self._waiting = self._waiting, []
            self._cond.notify_all()
        for job in waiting:
            job.cancelled = True
            job._put(_END)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    # -- the slots' thread -------------------------------------------------------------

    def _run(self, open_engine: Callable[[], Any]) -> None:
        self._main = greenlet.getcurrent()
        try:
            self.engine = open_engine()
            self.batch = Batch(BatchPolicy(self.engine.policy))
            self._slots = [_Slot(i, self.engine.for_sequence(i, self.batch)) for i in range(self.n)]
            for s in self._slots:
                for model in (s.engine.target, s.engine.draft):
                    if model is not None:
                        model.submit = self._submit
        except BaseException as e:
            self._open_error = e
            return
        finally:
            self._opened.set()
        try:
            while self._step():
                pass
        finally:
            self._close_engine()

    def _close_engine(self) -> None:
        base = self.engine.policy
        for s in self._slots:
            base.drafting_passes += getattr(s.engine.policy, "drafting_passes", 0)
            for model in (s.engine.target, s.engine.draft):
                if model is not None:
                    model.close()
        self.engine.close()

    def _step(self) -> bool:
        """Admit, run every ready slot until it waits, decode; False once closed and idle."""
        with self._cond:
            self._admit()
            while not any(s.job is not None for s in self._slots):
                if self._stopping:
                    return False
                self._step_end = None  # idle: the next step's time is not a step's
                self._cond.wait()
                self._admit()
        for s in self._slots:
            if s.job is not None and s.ready:
                self._resume(s)
        self._decode()
        return True

    def _admit(self) -> None:
        """The waiting jobs in order, each into the idle slot sharing the longest prefix with its prompt. A slot
        whose cancelled job is ending (after its pass) is waited for where it shares at least a prefill piece more
        than any idle one: evaluating that again would cost more than the wait (an editor's request after the
        warm-up it superseded takes the slot that warm-up loaded)."""
        while self._waiting:
            idle = [s for s in self._slots if s.job is None]
            if not idle:
                return
            job = self._waiting[0]

            def shared(s: _Slot) -> int:
                return common_prefix_len(s.engine.target.tokens, job.prompt)

            slot = max(idle, key=lambda s: (shared(s), -s.last_used))
            ending = [s for s in self._slots if s.job is not None and s.job.cancelled]
            if any(shared(s) >= shared(slot) + PREFILL_PIECE for s in ending):
                return
            self._waiting.pop(0)
            for other in idle:
                if other is not slot:
                    self._drop_cache(other)
            slot.job, job.slot = job, slot.index
            self.batch.running.add(slot.index)  # from now on the others do not run alone
            slot.greenlet = greenlet.greenlet(lambda slot=slot, job=job: self._body(slot, job), parent=self._main)
            self._by_greenlet[slot.greenlet] = slot
            slot.ready, slot.value, slot.request = True, None, None
            slot.started, slot.n_passes = time.perf_counter(), 0

    def _body(self, slot: _Slot, job: Job) -> object:
        items = None
        try:
            items = job.make()
            for item in items:
                job._put(item)
                slot.n_passes += 1
                if job.cancelled or self._stopping:
                    break
        except BaseException as e:  # the job's error, not the scheduler's: its reader raises it
            job._put(_Failure(e))
        finally:
            try:
                if items is not None and hasattr(items, "close"):
                    items.close()
            except Exception:
                log.exception("closing a generation failed")
            job._put(_END)
        return _END

    def _submit(self, view, tokens: list[int], n_logits: int, copy: bool) -> np.ndarray:
        """A slot's model call: wait (in the scheduler) for the batch that decodes it."""
        if greenlet.getcurrent() is self._main:  # outside any slot (closing): decode alone
            rows = view.decode_batch([(view, tokens, n_logits)])[0]
            if isinstance(rows, BaseException):
                raise rows
            return rows.copy() if copy else rows
        return self._main.switch(_Request(view, tokens, n_logits, copy))

    def _resume(self, slot: _Slot) -> None:
        value, slot.ready, slot.value = slot.value, False, None
        g = slot.greenlet
        if isinstance(value, BaseException):
            out = g.throw(value)
        else:
            out = g.switch(value) if value is not None else g.switch()
        if isinstance(out, _Request):
            slot.request = out
            return
        # the generation ended
        del self._by_greenlet[g]
        self.batch.running.discard(slot.index)
        slot.job = slot.greenlet = slot.request = None
        slot.last_used = time.perf_counter()

    def _decode(self) -> None:
        """One llama_decode: the draft model's requests first, else the target's."""
        waiting = [s for s in self._slots if s.job is not None and s.request is not None]
        if not waiting:
            return
        target_base = self.engine.target._base
        drafts = [s for s in waiting if s.request.view._base is not target_base]
        group = drafts or waiting
        base = group[0].request.view._base
        group.sort(key=lambda s: len(s.request.tokens) - s.request.done)
        budget = base.n_batch
        limit = budget if len(group) == 1 else min(budget, PIECE)
        pieces, chosen = [], []
        for s in group:
            r = s.request
            remaining = len(r.tokens) - r.done
            take = min(remaining, max(limit, r.n_logits), budget)
            if take < remaining:
                take = min(take, remaining - r.n_logits)  # a partial piece holds no logits rows
            if take <= 0:
                continue
            pieces.append((r.view, r.tokens[r.done:r.done + take], r.n_logits if take == remaining else 0))
            chosen.append((s, take))
            budget -= take
        self._make_room(base, sum(take for _, take in chosen))
        if len(chosen) > 1 and min(take for _, take in chosen) > base.free_cells():
            # no piece fits the shared cells: one generation ends ("length"), the one holding the most cells, and
            # the others wait for them (its cache goes once it is idle), rather than every one ending at once
            s = max((s for s, _ in chosen), key=lambda s: len(s.request.view.tokens))
            s.request, s.value, s.ready = None, ContextFull(
                f"the shared cache is full: {base.free_cells()} of its cells are free (-c/--ctx-size)"), True
            return
        try:
            results = base.decode_batch(pieces)
        except Exception as e:
            for s, _ in chosen:
                s.request, s.value, s.ready = None, e, True
            return
        if base is target_base:
            self.n_target_passes += 1
            self.n_target_rows += sum(p[2] for p in pieces)
            self._time_step(pieces)
        else:
            self._draft_decodes += 1
            self._draft_tokens += sum(len(tokens) for _, tokens, _ in pieces)
        for (s, take), rows in zip(chosen, results):
            r = s.request
            if isinstance(rows, BaseException):
                s.request, s.value, s.ready = None, rows, True
                continue
            r.done += take
            if r.done == len(r.tokens):
                s.request, s.ready = None, True
                s.value = rows.copy() if r.copy else rows
                if s.value is None:  # never None: an empty result is an empty array
                    s.value = np.empty((0, base.n_vocab), dtype=np.float32)

    def _time_step(self, pieces) -> None:
        """A step of several slots, from the previous target pass's end to this one's, for the batch policy:
        only where every piece is a slot's pass (no prompt in pieces) and more than one slot ran."""
        now = time.perf_counter()
        passes = all(n_logits == len(tokens) for _, tokens, n_logits in pieces)
        if self._step_end is not None and passes and len(pieces) > 1:
            self.batch.policy.observe_step(now - self._step_end, sum(len(t) for _, t, _ in pieces),
                                           self._draft_decodes, self._draft_tokens)
        self._step_end, self._draft_decodes, self._draft_tokens = now, 0, 0
        self.batch.step = self.n_target_passes

    def _make_room(self, base, n_tokens: int) -> None:
        """Where the shared cache lacks cells for a batch, idle slots' caches go first (least recently used)."""
        idle = sorted((s for s in self._slots if s.job is None), key=lambda s: s.last_used)
        for s in idle:
            if base.free_cells() >= n_tokens:
                return
            self._drop_cache(s)

    @staticmethod
    def _drop_cache(slot: _Slot) -> None:
        """An idle slot's cache goes: every pass attends over all the cells the slots hold (llama.cpp's unified
        cache), so a cache no running generation uses slows every other slot's passes. A new generation keeps
        only the cache of the slot it takes, the one sharing the longest prefix with its prompt: as one slot
        keeps its one cache."""
        for model in (slot.engine.target, slot.engine.draft):
            if model is not None and model.tokens:
                model.clear()
