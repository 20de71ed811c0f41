"""One model pair, one generation at a time: a FIFO queue and the thread
that runs it.

The worker thread owns the model: it opens it, runs every generation and
closes it. llama.cpp's OpenMP thread pool belongs to the thread that calls
it; a second thread decoding (say, the main thread loading and warming up,
then a worker generating) makes libgomp manage more threads than there are
cores, and it then cuts its spin-waits short: every barrier sleeps, and the
tiny test pair decodes 14x slower on 2 cores. Request threads only tokenize.

With ``slots`` > 1 (``serve -np N``) up to that many jobs run at once, each
pulled by a thread of its own; the model's parallel slots
(:mod:`specllama.slots`) do their decoding, in one thread of theirs, batched.

A job is an API chunk iterator (``SpeculativeLlama.create_*(stream=True)``)
and where its chunks go. The worker thread takes jobs in arrival order and
pulls their chunks; each chunk is one target pass, so a job cancelled by
its client (or by shutdown) stops within one pass, its stream is closed,
and the next job starts at once. The event loop never waits on a
generation: it only submits, cancels, and receives what :meth:`Job.deliver`
and :meth:`Job.finish` send it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable, Iterator, Protocol

from ..stats import GenerationStats

log = logging.getLogger("specllama.server")

# how a job ended
OK, CANCELLED, SHUTDOWN, ERROR, SUPERSEDED = "ok", "cancelled", "shutdown", "error", "superseded"


class QueueFull(Exception):
    """More requests are waiting than ``max_queue`` allows."""


class ShuttingDown(Exception):
    """The server stopped taking requests."""


class Job(Protocol):
    """What the worker needs of a job; ``deliver`` and ``finish`` are called
    from the worker thread (``finish`` also from a thread cancelling a
    waiting job), exactly one ``finish`` per job."""

    chunks: Iterator[dict]
    cancelled: bool

    def deliver(self, chunk: dict) -> None: ...

    def finish(self, outcome: str, stats: GenerationStats | None, error: BaseException | None) -> None: ...


class Worker:
    """Opens the model in its own thread, then runs jobs there one at a
    time, in the order they were submitted; closes the model when stopped.

    Args:
        open_model: makes the model (a ``SpeculativeLlama``: its ``take_stats()``
            gives the statistics of the generation that just ended).
        max_queue: jobs that may wait behind the running one; one more is
            refused with :class:`QueueFull`.
        on_finish: called with (job, outcome, stats) before the job hears
            of its end (metrics, so they are current when a response is).
        slots: jobs that run at once (the model's ``n_parallel``).
    """

    def __init__(self, open_model: Callable[[], Any], *, max_queue: int,
                 on_finish: Callable[[Job, str, GenerationStats | None], None] = lambda *a: None,
                 slots: int = 1) -> None:
        self.max_queue = max_queue
        self.slots = slots
        self.on_finish = on_finish
        self.model: Any = None
        self._open_model = open_model
        self._opened = threading.Event()
        self._open_error: BaseException | None = None
        self._cond = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._running: list[Job] = []
        self._accepting = True
        self._shutting_down = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="specllama-worker", daemon=True)

    # -- the event loop's side -----------------------------------------------

    def start(self) -> Any:
        """Start the thread (once) and wait until it has opened the model.

        Returns:
            the model.

        Raises:
            whatever opening the model raised.
        """
        if self._thread.ident is None:
            self._thread.start()
        self._opened.wait()
        if self._open_error is not None:
            raise self._open_error
        return self.model

    def submit(self, job: Job) -> None:
        """Queue a job. A job with a ``client`` supersedes that client's
        warm-ups (jobs marked ``warm_up``): the waiting ones end now, the
        running one after its current piece, as ``"superseded"`` (an editor
        sends a warm-up a second; it must never delay a completion by more
        than that piece). The job starts once a running warm-up it superseded
        has ended, so that with several slots it can take that slot, whose
        cache holds what the warm-up loaded (:meth:`Slots._admit`).

        Raises:
            QueueFull: ``max_queue`` jobs are already waiting behind a running one.
            ShuttingDown: after :meth:`shutdown`.
        """
        client = getattr(job, "client", None)
        with self._cond:
            if not self._accepting:
                raise ShuttingDown
            dropped = [j for j in self._waiting if client is not None and _warm_up_of(j, client)]
            busy = len(self._running) >= self.slots or self._waiting
            if busy and len(self._waiting) - len(dropped) >= self.max_queue:
                raise QueueFull  # refused: nothing is superseded
            for j in dropped:
                self._waiting.remove(j)
            after = [r for r in self._running if client is not None and _warm_up_of(r, client)]
            for running in after:
                running.superseded = True  # type: ignore[attr-defined]
                running.cancelled = True
            job.after = after  # type: ignore[attr-defined]
            self._waiting.append(job)
            self._cond.notify_all()
        for j in dropped:
            self._end(j, SUPERSEDED, None, None)

    def cancel(self, job: Job) -> None:
        """Stop a job: a waiting one ends now, the running one after its
        current target pass; an ended one is left alone."""
        with self._cond:
            job.cancelled = True
            try:
                self._waiting.remove(job)
            except ValueError:
                return  # running (the worker ends it) or already ended
        self._end(job, CANCELLED, None, None)

    @property
    def queue_length(self) -> int:
        """Jobs waiting (the running ones not counted)."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def accepting(self) -> bool:
        return self._accepting

    def shutdown(self) -> None:
        """Take no more jobs; end the waiting ones, and the running one after
        its current target pass, as ``"shutdown"``."""
        with self._cond:
            self._accepting = False
            self._shutting_down = True
            waiting = list(self._waiting)
            self._waiting.clear()
        for job in waiting:
            self._end(job, SHUTDOWN, None, None)

    def stop(self, timeout: float | None = None) -> None:
        """:meth:`shutdown`, then wait for the thread to end: after at most
        one more target pass, it frees the model."""
        self.shutdown()
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the worker thread ---------------------------------------------------

    def _run(self) -> None:
        try:
            self.model = self._open_model()
        except BaseException as e:
            self._open_error = e
            return
        finally:
            self._opened.set()
        try:
            while True:
                with self._cond:
                    while (not self._waiting or len(self._running) >= self.slots
                           or any(j in self._running for j in getattr(self._waiting[0], "after", ()))) \
                            and not self._stopped:
                        self._cond.wait()
                    if not self._waiting:
                        while self._running:  # stopped: the running jobs end after their current pass
                            self._cond.wait()
                        return
                    job = self._waiting.popleft()
                    self._running.append(job)
                if self.slots == 1:
                    self._work(job)
                else:
                    threading.Thread(target=self._work, args=(job,), name="specllama-job", daemon=True).start()
        finally:
            self.model.close()

    def _work(self, job: Job) -> None:
        outcome, error = self._generate(job)
        # the generation's own record with parallel slots; else the model's latest
        stats = getattr(job.chunks, "stats", None) if self.slots > 1 else self.model.take_stats()
        with self._cond:
            self._running.remove(job)
            self._cond.notify_all()
        self._end(job, outcome, stats, error)

    def _generate(self, job: Job) -> tuple[str, BaseException | None]:
        outcome: str = OK
        error: BaseException | None = None
        try:
            for chunk in job.chunks:  # one target pass per chunk
                job.deliver(chunk)
                if job.cancelled:
                    outcome = SUPERSEDED if getattr(job, "superseded", False) else CANCELLED
                    break
                if self._shutting_down:
                    outcome = SHUTDOWN
                    break
        except Exception as e:  # the job's error, not the worker's: answer it and go on
            outcome, error = ERROR, e
            if not isinstance(e, ValueError):
                log.exception("generation failed")
        finally:
            try:
                job.chunks.close()  # type: ignore[attr-defined]
            except Exception:
                log.exception("closing a generation failed")
        return outcome, error

    def _end(self, job: Job, outcome: str, stats: GenerationStats | None, error: BaseException | None) -> None:
        try:
            self.on_finish(job, outcome, stats)
        except Exception:
            log.exception("recording a request failed")
        job.finish(outcome, stats, error)


def _warm_up_of(job: Job, client: str) -> bool:
    return bool(getattr(job, "warm_up", False)) and getattr(job, "client", None) == client
