"""The server's worker in process (`specllama.server.worker.Worker`): one real
SpeculativeLlama on the tiny pair, jobs whose chunks are the API's own
streams. A job can hold the worker inside a chunk (a gate in ``deliver``), so
"while a job runs" and "while one waits" are states a test sets up exactly,
not races. (The same behaviours through HTTP, in a real `specllama serve`
process: tests/test_server.py.)"""

from __future__ import annotations

import threading
import time

import pytest

from specllama import SpeculativeLlama
from specllama.server.worker import CANCELLED, ERROR, OK, SHUTDOWN, QueueFull, ShuttingDown, Worker

PROMPT = "once upon a time there lived a king"
WAIT = 30.0  # seconds any wait may take before the test fails instead of hanging
LONG = 200  # tokens: a job that, unless stopped, runs for many target passes


class RecordedLlama(SpeculativeLlama):
    """The real model, and a flag set when it is closed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.closed = threading.Event()

    def close(self) -> None:
        super().close()
        self.closed.set()


class Job:
    """A job as the worker sees it; with ``hold``, the worker stays inside its
    first chunk's delivery until :meth:`release`."""

    def __init__(self, chunks, *, hold: bool = False) -> None:
        self.chunks = chunks
        self.cancelled = False
        self.delivered: list[dict] = []
        self.outcome: str | None = None
        self.stats = None
        self.error: BaseException | None = None
        self.n_finish = 0
        self.started = threading.Event()
        self.ended = threading.Event()
        self._gate = threading.Event()
        if not hold:
            self._gate.set()

    def deliver(self, chunk: dict) -> None:
        self.delivered.append(chunk)
        self.started.set()
        self._gate.wait(WAIT)

    def finish(self, outcome, stats, error) -> None:
        self.outcome, self.stats, self.error = outcome, stats, error
        self.n_finish += 1
        self.ended.set()

    def release(self) -> None:
        self._gate.set()

    @property
    def text(self) -> str:
        return "".join(c["choices"][0]["text"] for c in self.delivered)

    @property
    def n_tokens(self) -> int:
        return sum(c["origins"]["n_tokens"] for c in self.delivered if "origins" in c)  # the last chunk: none


class Harness:
    """A started worker, what its ``on_finish`` saw, and jobs on its model."""

    def __init__(self, tiny_pair, max_queue: int, slots: int = 1, n_ctx: int = 512) -> None:
        self.finished: list[tuple[Job, str, object, bool]] = []  # (job, outcome, stats, job already told)
        self.worker = Worker(lambda: RecordedLlama(tiny_pair[0], tiny_pair[1], n_ctx=n_ctx, seed=0, draft_max=3,
                                                   adaptive=False, n_threads=1, n_parallel=slots),
                             max_queue=max_queue, on_finish=self._on_finish, slots=slots)
        self.model = self.worker.start()
        self.jobs: list[Job] = []

    def _on_finish(self, job, outcome, stats) -> None:
        self.finished.append((job, outcome, stats, job.ended.is_set()))

    def job(self, max_tokens: int, *, hold: bool = False) -> Job:
        """A greedy completion of PROMPT, as a stream of the API's chunks (each with its origins)."""
        job = Job(self.model.create_completion(PROMPT, max_tokens=max_tokens, temperature=0, stream=True,
                                               origins=True), hold=hold)
        self.jobs.append(job)
        return job

    def running(self, job: Job) -> Job:
        """Submit ``job`` and wait until the worker is inside its first chunk."""
        self.worker.submit(job)
        assert job.started.wait(WAIT)
        return job

    def close(self) -> None:
        for job in self.jobs:
            job.release()
        self.worker.stop(WAIT)


@pytest.fixture
def harness(tiny_pair):
    made: list[Harness] = []

    def make(max_queue: int = 1, slots: int = 1, n_ctx: int = 512) -> Harness:
        made.append(Harness(tiny_pair, max_queue, slots, n_ctx))
        return made[-1]

    yield make
    for h in made:
        h.close()


def ended(*jobs: Job) -> bool:
    return all(job.ended.wait(WAIT) for job in jobs)


def test_jobs_run_in_arrival_order_and_each_gets_its_solo_text(harness):
    h = harness()
    solo = h.job(12)
    h.worker.submit(solo)
    assert ended(solo) and solo.outcome == OK
    first = h.running(h.job(12, hold=True))
    second = h.job(12)
    h.worker.submit(second)
    assert (h.worker.running, h.worker.queue_length) == (1, 1)
    first.release()
    assert ended(first, second)
    assert [(job, outcome) for job, outcome, _, _ in h.finished] == [(solo, OK), (first, OK), (second, OK)]
    assert first.text == second.text == solo.text and solo.n_tokens == 12
    assert [stats.n_tokens for _, _, stats, _ in h.finished] == [12, 12, 12]
    assert not any(told for *_, told in h.finished)  # on_finish comes before the job hears of its end
    assert [job.error for job in (solo, first, second)] == [None, None, None]


@pytest.mark.parametrize("max_queue", [0, 1, 2])
def test_a_full_queue_refuses_one_more_and_takes_jobs_again_once_there_is_room(harness, max_queue):
    h = harness(max_queue)
    first = h.running(h.job(LONG, hold=True))
    waiting = [h.job(4) for _ in range(max_queue)]
    for job in waiting:
        h.worker.submit(job)
    refused = h.job(4)
    with pytest.raises(QueueFull):
        h.worker.submit(refused)
    assert (h.worker.running, h.worker.queue_length) == (1, max_queue)
    first.release()
    assert ended(first, *waiting)
    assert [outcome for _, outcome, _, _ in h.finished] == [OK] * (1 + max_queue)
    assert refused.n_finish == 0 and refused.delivered == []  # refused: never queued, never told
    again = h.job(4)
    h.worker.submit(again)  # an idle worker takes a job whatever max_queue is
    assert ended(again) and again.outcome == OK and again.n_tokens == 4


def test_cancelling_a_waiting_job_ends_it_at_once_and_it_never_runs(harness):
    h = harness(2)
    first = h.running(h.job(12, hold=True))
    gone, kept = h.job(12), h.job(12)
    h.worker.submit(gone)
    h.worker.submit(kept)
    h.worker.cancel(gone)
    assert gone.ended.is_set() and gone.outcome == CANCELLED  # now, while the first still holds the worker
    assert (gone.delivered, gone.stats, gone.error) == ([], None, None)
    assert h.finished == [(gone, CANCELLED, None, False)] and h.worker.queue_length == 1
    first.release()
    assert ended(first, kept)
    h.worker.cancel(gone)  # an ended job: left alone
    h.worker.cancel(first)
    assert (gone.n_finish, first.n_finish, kept.n_finish) == (1, 1, 1)
    assert [(job, outcome) for job, outcome, _, _ in h.finished] == [(gone, CANCELLED), (first, OK), (kept, OK)]
    assert gone.delivered == [] and first.text == kept.text


def test_cancelling_the_running_job_stops_it_after_its_current_pass_and_the_next_starts(harness):
    h = harness()
    solo = h.job(12)
    h.worker.submit(solo)
    assert ended(solo)
    running = h.running(h.job(LONG, hold=True))
    after = h.job(12)
    h.worker.submit(after)
    h.worker.cancel(running)
    assert not running.ended.is_set() and h.worker.queue_length == 1  # running: it ends after this pass
    running.release()
    assert ended(running, after)
    assert running.outcome == CANCELLED and len(running.delivered) == 1  # not one chunk more
    assert running.stats.n_tokens == running.n_tokens < LONG  # what it did generate, counted
    assert next(running.chunks, None) is None  # its stream was closed
    assert after.outcome == OK and after.text == solo.text
    assert [outcome for _, outcome, _, _ in h.finished] == [OK, CANCELLED, OK]


def test_shutdown_ends_the_waiting_jobs_at_once_the_running_one_after_its_pass_and_refuses_new_ones(harness):
    h = harness(2)
    running = h.running(h.job(LONG, hold=True))
    waiting = [h.job(12), h.job(12)]
    for job in waiting:
        h.worker.submit(job)
    h.worker.shutdown()
    assert all(job.ended.is_set() and job.outcome == SHUTDOWN and job.delivered == [] for job in waiting)
    assert not running.ended.is_set() and not h.worker.accepting
    with pytest.raises(ShuttingDown):
        h.worker.submit(h.job(4))
    running.release()
    assert ended(running)
    assert running.outcome == SHUTDOWN and len(running.delivered) == 1
    assert running.stats.n_tokens == running.n_tokens < LONG
    h.worker.stop(WAIT)
    assert h.model.closed.is_set()  # the worker thread freed the model
    assert [(job, outcome) for job, outcome, _, _ in h.finished] == [(waiting[0], SHUTDOWN), (waiting[1], SHUTDOWN),
                                                                     (running, SHUTDOWN)]


def test_a_job_that_fails_is_answered_with_its_error_and_the_next_runs(harness):
    h = harness()

    def bad_chunks():
        stream = h.model.create_completion(PROMPT, max_tokens=LONG, temperature=0, stream=True, origins=True)
        yield next(stream)
        stream.close()
        raise ValueError("a bad value met mid-generation")

    failing = Job(bad_chunks())
    h.worker.submit(failing)
    assert ended(failing)
    assert failing.outcome == ERROR and str(failing.error) == "a bad value met mid-generation"
    assert len(failing.delivered) == 1
    after = h.job(12)
    h.worker.submit(after)
    assert ended(after) and after.outcome == OK and after.n_tokens == 12


def test_a_model_that_cannot_open_raises_from_start(tmp_path):
    missing = str(tmp_path / "missing.gguf")
    worker = Worker(lambda: SpeculativeLlama(missing, None, n_threads=1), max_queue=1)
    with pytest.raises(Exception, match="missing.gguf"):
        worker.start()


def test_a_clients_request_supersedes_its_warm_ups(harness):
    """An editor's warm-ups (prompt loads, ``SpeculativeLlama.prefill``) give
    way to that client's next request: a waiting one ends at once, a running
    one after its current piece; another client's warm-up is left alone."""
    from specllama.server.worker import SUPERSEDED

    h = harness(max_queue=4)
    blocker = h.running(h.job(12, hold=True))

    def warm_up(client: str) -> Job:
        job = Job(h.model.prefill(h.model.tokenize(PROMPT * 6)))
        job.client, job.warm_up, job.superseded = client, True, False
        h.jobs.append(job)
        return job

    mine, theirs = warm_up("a"), warm_up("b")
    for job in (mine, theirs):
        h.worker.submit(job)
    completion = h.job(4)
    completion.client = "a"
    h.worker.submit(completion)
    assert ended(mine) and mine.outcome == SUPERSEDED and mine.delivered == []  # dropped while waiting
    assert h.worker.queue_length == 2  # theirs, then the completion
    blocker.release()
    assert ended(theirs, completion) and (theirs.outcome, completion.outcome) == (OK, OK)
    assert theirs.delivered[-1]["done"] is True and theirs.delivered[-1]["n_evaluated"] > 0
    # a running warm-up stops after its current piece
    gate = Job(h.model.prefill(h.model.tokenize(PROMPT * 12)), hold=True)  # two pieces of the prompt
    gate.client, gate.warm_up, gate.superseded = "a", True, False
    h.jobs.append(gate)
    h.running(gate)
    newer = h.job(4)
    newer.client = "a"
    h.worker.submit(newer)
    gate.release()
    assert ended(gate, newer) and (gate.outcome, newer.outcome) == (SUPERSEDED, OK)
    assert len(gate.delivered) == 1 and gate.delivered[0]["done"] is False  # one piece, then it gave way


def test_with_slots_the_request_takes_the_slot_its_warm_up_loaded(harness):
    """Two slots: the client's request waits for the warm-up it superseded to end (after the piece it is in), then
    takes that slot, whose cache holds what the warm-up loaded (at least its first piece of 256 tokens): it
    evaluates only the rest, where the idle, empty slot (which it took while the warm-up still loaded its 8
    pieces) evaluated all of it."""
    from specllama.server.worker import SUPERSEDED

    h = harness(max_queue=4, slots=2, n_ctx=4096)
    prompt = h.model.tokenize(PROMPT * 200)[:2000]
    gate = Job(h.model.prefill(prompt), hold=True)
    gate.client, gate.warm_up, gate.superseded = "a", True, False
    h.jobs.append(gate)
    h.running(gate)
    newer = Job(h.model.create_completion(prompt, max_tokens=2, temperature=0, stream=True, timings=True))
    newer.client = "a"
    h.jobs.append(newer)
    h.worker.submit(newer)
    # the warm-up's reader is still on its first piece (as a server's is while the piece is sent); meanwhile a
    # request started at once would take the empty slot
    time.sleep(0.5)
    gate.release()
    assert ended(gate, newer) and (gate.outcome, newer.outcome) == (SUPERSEDED, OK)
    assert len(gate.delivered) == 1 and gate.delivered[0] | {"seconds": 0} == {
        "n_prompt": 2000, "n_evaluated": 256, "n_cached": 256, "seconds": 0, "done": False}
    assert newer.delivered[-1]["timings"]["prompt_n"] <= len(prompt) - 1 - 256
