"""One model pair, one generation at a time: a FIFO queue and the thread
that runs it.

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
from typing import Callable, Iterator, Protocol

from ..stats import GenerationStats

log = logging.getLogger("specllama.server")

# how a job ended
OK, CANCELLED, SHUTDOWN, ERROR = "ok", "cancelled", "shutdown", "error"


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
    """Runs jobs one at a time, in the order they were submitted.

    Args:
        max_queue: jobs that may wait behind the running one; one more is
            refused with :class:`QueueFull`.
        take_stats: the statistics of the generation that just ended
            (``ServedLlama.take_stats``).
        on_finish: called with (job, outcome, stats) before the job hears
            of its end (metrics, so they are current when a response is).
    """

    def __init__(self, *, max_queue: int, take_stats: Callable[[], GenerationStats | None],
                 on_finish: Callable[[Job, str, GenerationStats | None], None] = lambda *a: None) -> None:
        self.max_queue = max_queue
        self._take_stats = take_stats
        self._on_finish = on_finish
        self._cond = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._running: Job | None = None
        self._accepting = True
        self._shutting_down = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="specllama-worker", daemon=True)

    # -- the event loop's side -----------------------------------------------

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stopped:
            self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue a job.

        Raises:
            QueueFull: ``max_queue`` jobs are already waiting behind a running one.
            ShuttingDown: after :meth:`shutdown`.
        """
        with self._cond:
            if not self._accepting:
                raise ShuttingDown
            busy = self._running is not None or self._waiting
            if busy and len(self._waiting) >= self.max_queue:
                raise QueueFull
            self._waiting.append(job)
            self._cond.notify_all()

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
        """Jobs waiting (the running one not counted)."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        return int(self._running is not None)

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
        """:meth:`shutdown`, then wait for the thread to end (after at most
        one more target pass), so the models can be freed."""
        self.shutdown()
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the worker thread ---------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopped:
                    self._cond.wait()
                if not self._waiting:
                    return
                job = self._running = self._waiting.popleft()
            outcome, error = self._generate(job)
            stats = self._take_stats()
            with self._cond:
                self._running = None
            self._end(job, outcome, stats, error)

    def _generate(self, job: Job) -> tuple[str, BaseException | None]:
        outcome: str = OK
        error: BaseException | None = None
        try:
            for chunk in job.chunks:  # one target pass per chunk
                job.deliver(chunk)
                if job.cancelled:
                    outcome = CANCELLED
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
            self._on_finish(job, outcome, stats)
        except Exception:
            log.exception("recording a request failed")
        job.finish(outcome, stats, error)
