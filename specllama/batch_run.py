"""``specllama batch``: OpenAI's Batch API files, answered offline.

The input has one request a line, as OpenAI's batch input::

    {"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

(``url`` ``/v1/chat/completions`` or ``/v1/completions``; ``body`` as for
``specllama serve``). The output gets one line a request, in the order they
finish, as OpenAI's batch output::

    {"id": "batch_req_...", "custom_id": "q1", "error": null,
     "response": {"status_code": 200, "request_id": "...", "body": {...}}}

A request the API refuses is answered as OpenAI answers it in a batch:
``status_code`` 400 and an OpenAI error object as the body. A line that is
no request (not JSON, an unknown url, ...) is reported by its number, and
written when it names a ``custom_id`` with ``"response": null`` and
``"error": {"code", "message"}`` (OpenAI's error of a request never made).

Each body takes the HTTP server's road (:mod:`specllama.server.calls`), so
a batch answer is what ``specllama serve`` would send. Lines are written
and flushed as each request finishes: a run that is killed keeps them, and
the next run over the same output skips the ``custom_id``s it holds.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator

from .api import SpeculativeLlama
from .errors import SpecLlamaError
from .server.calls import ROUTES, answer
from .server.errors import SERVER, ApiError
from .server.settings import RequestDefaults

METHOD = "POST"  # the only method of OpenAI's batch input
MAX_LINES_NAMED = 10  # a summary names at most this many failed lines


@dataclass(frozen=True)
class Request:
    """One valid input line."""

    line: int
    custom_id: str
    url: str
    body: dict


@dataclass(frozen=True)
class BadLine:
    """An input line that is no request; ``custom_id`` where it names one
    (then it is written to the output)."""

    line: int
    message: str
    code: str
    custom_id: str | None = None


@dataclass(frozen=True)
class Outcome:
    """A request's answer: the output line, and a failure's message."""

    request: Request
    record: dict
    status: int
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass
class Batch:
    """One run over an input file: its requests, its bad lines, and what
    the output file already holds (read when made; nothing is written until
    :meth:`run`).

    Args:
        input_path: the requests (JSONL).
        output_path: the answers; an existing file is resumed (appended to).
    """

    input_path: str
    output_path: str
    requests: list[Request] = field(init=False)
    bad_lines: list[BadLine] = field(init=False)
    skipped: int = field(init=False, default=0)
    skipped_failed: int = field(init=False, default=0)
    outcomes: list[Outcome] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        items = list(read_requests(self.input_path))
        if os.path.exists(self.output_path) and os.path.samefile(self.input_path, self.output_path):
            raise SpecLlamaError(f"-o {self.output_path!r} is the input file: give another output file",
                                 param="output")
        written, self._keep_bytes = read_written(self.output_path)
        self.requests, self.bad_lines, self._unwritten = [], [], []
        for item in items:
            if isinstance(item, BadLine):
                self.bad_lines.append(item)  # named again on every run, written once
                if item.custom_id is not None and item.custom_id not in written:
                    self._unwritten.append(item)
            elif item.custom_id in written:
                self.skipped += 1
                self.skipped_failed += not written[item.custom_id]
            else:
                self.requests.append(item)

    def where(self, line: int) -> str:
        """``requests.jsonl:7``: a line as messages name it."""
        return f"{self.input_path}:{line}"

    def run(self, open_model: Callable[[], SpeculativeLlama], *, defaults: RequestDefaults,
            alias: Callable[[SpeculativeLlama], str],
            n_parallel: int = 1) -> Iterator[Outcome]:
        """Writes the bad lines that name a ``custom_id``, then (when there
        are requests to run) opens the model and answers them, each written
        and flushed before it is yielded.

        Args:
            open_model: makes the model (a ``SpeculativeLlama``, closed at the end).
            defaults: the values of the sampling fields a body leaves out.
            alias: the model id the answers report, from the model.
            n_parallel: requests run at once, each from its own thread (1: in this one).
        """
        with open_output(self.output_path, self._keep_bytes) as out:
            for bad in self._unwritten:
                write_line(out, error_record(bad.custom_id, bad.code, bad.message))
            if not self.requests:
                return
            with open_model() as llm:
                name = alias(llm)

                def one(request: Request, stop: threading.Event | None = None) -> Outcome:
                    return answer_request(llm, request, defaults=defaults, alias=name, stop=stop)

                for outcome in run_all(self.requests, one, n_parallel):
                    write_line(out, outcome.record)
                    self.outcomes.append(outcome)
                    yield outcome

    @property
    def failed(self) -> bool:
        """Whether the output lacks an answer for a line: a bad line, a
        refused request now, or a failed one written before."""
        return bool(self.bad_lines or self.skipped_failed or any(not o.ok for o in self.outcomes))

    def summary(self) -> str:
        """One line: what was answered, failed, skipped and not run."""
        failed_lines = sorted([b.line for b in self.bad_lines] + [o.request.line for o in self.outcomes if not o.ok])
        n_ok = sum(o.ok for o in self.outcomes)
        parts = [f"{n_ok} answered"]
        if failed_lines:
            named = ", ".join(map(str, failed_lines[:MAX_LINES_NAMED]))
            more = f" and {len(failed_lines) - MAX_LINES_NAMED} more" if len(failed_lines) > MAX_LINES_NAMED else ""
            parts.append(f"{len(failed_lines)} failed ({_lines(len(failed_lines))} {named}{more})")
        if self.skipped:
            failed = f", {self.skipped_failed} of them failed" if self.skipped_failed else ""
            parts.append(f"{self.skipped} skipped (already in {self.output_path}{failed})")
        not_run = len(self.requests) - len(self.outcomes)
        if not_run:
            parts.append(f"{not_run} not run (the same command again goes on)")
        return f"batch: {', '.join(parts)}; answers in {self.output_path}"


def _lines(n: int) -> str:
    return "line" if n == 1 else "lines"


def open_llama(kwargs: dict, n_parallel: int) -> SpeculativeLlama:
    """The model pair for a batch: ``SpeculativeLlama(**kwargs)`` under the
    server's rules (``convention="openai"``), with ``n_parallel`` slots
    (:mod:`specllama.slots`: their passes are decoded in shared batches)."""
    return SpeculativeLlama(**kwargs, convention="openai", n_parallel=n_parallel)


# -- reading -----------------------------------------------------------------


def read_requests(path: str) -> Iterator[Request | BadLine]:
    """Each non-blank line of the input as a request or a bad line; a
    ``custom_id`` seen before makes its later lines bad (and unwritten: the
    output keeps one line per ``custom_id``)."""
    try:
        with open(path, "rb") as f:
            raw_lines = f.read().removeprefix(b"\xef\xbb\xbf").split(b"\n")  # a BOM is no part of line 1
    except OSError as e:
        raise SpecLlamaError(f"cannot read the requests file {path!r}: {e.strerror or e}", param="input") from None
    seen: dict[str, int] = {}
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        item = parse_line(number, raw)
        if item.custom_id in seen:
            item = BadLine(number, f"custom_id {item.custom_id!r} is used by line {seen[item.custom_id]} "
                                   f"already (each request needs its own)", "duplicate_custom_id")
        elif item.custom_id is not None:
            seen[item.custom_id] = number
        yield item


def parse_line(number: int, raw: bytes) -> Request | BadLine:
    """One input line as a request, or why it is none."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return BadLine(number, f"not UTF-8 text ({e.reason} at byte {e.start})", "invalid_json")
    except json.JSONDecodeError as e:
        return BadLine(number, f"not valid JSON ({e.msg} at column {e.colno})", "invalid_json")
    except RecursionError:
        return BadLine(number, "not valid JSON (nested too deeply)", "invalid_json")
    if not isinstance(obj, dict):
        return BadLine(number, f"expected a JSON object with custom_id, method, url and body, got "
                               f"{type(obj).__name__}", "invalid_request")
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or not _utf8(custom_id):
        what = "missing" if custom_id is None else f"must be a non-empty string, got {_short(custom_id)}"
        return BadLine(number, f"custom_id {what}", "missing_custom_id")
    method, url, body = obj.get("method"), obj.get("url"), obj.get("body")
    if method != METHOD:
        return BadLine(number, f"method must be \"POST\", got {_short(method)}", "invalid_method", custom_id)
    if url not in ROUTES:
        return BadLine(number, f"url must be {' or '.join(map(repr, ROUTES))}, got {_short(url)}", "invalid_url",
                       custom_id)
    if not isinstance(body, dict):
        return BadLine(number, f"body must be a JSON object (the request body), got {_short(body)}",
                       "invalid_body", custom_id)
    return Request(number, custom_id, url, body)


def read_written(path: str) -> tuple[dict[str, bool], int | None]:
    """What an existing output holds: ``{custom_id: answered with status 200}``,
    and the bytes to keep (None: all; less when its last line was cut off by
    a killed run). A line that is not a batch output line, other than the
    last, makes it no file to resume."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}, None
    except OSError as e:
        raise SpecLlamaError(f"cannot read the output file {path!r}: {e.strerror or e}", param="output") from None
    written: dict[str, bool] = {}
    start = 0
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        end = start + len(raw)
        if raw.strip():
            record = _output_record(raw)
            if record is None:
                if number == len(lines):  # the last line, never finished: it goes
                    return written, start
                raise SpecLlamaError(f"{path}:{number}: not a batch output line, so {path!r} cannot be resumed: "
                                     f"give another -o, or remove that line", param="output")
            response = record.get("response")
            written[record["custom_id"]] = (record.get("error") is None and isinstance(response, dict)
                                            and response.get("status_code") == 200)
        start = end + 1
    return written, None


def _output_record(raw: bytes) -> dict | None:
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("custom_id"), str):
        return None
    return record


# -- answering ---------------------------------------------------------------


class _Stopped(Exception):
    """A request given up because the run ends (Ctrl-C)."""


def answer_request(llm: SpeculativeLlama, request: Request, *, defaults: RequestDefaults, alias: str,
                   stop: threading.Event | None = None) -> Outcome:
    """A request's answer through the server's translation; ``stop``, once
    set, ends its generation within one target pass (:class:`_Stopped`)."""
    def check() -> None:
        if stop is not None and stop.is_set():
            raise _Stopped

    try:
        body = answer(llm, ROUTES[request.url], request.body, defaults=defaults, alias=alias, on_chunk=check)
    except ApiError as e:
        return Outcome(request, response_record(request.custom_id, e.status, e.body()), e.status, e.message)
    except (_Stopped, KeyboardInterrupt):
        raise
    except Exception as e:  # a fault of specllama's or llama.cpp's: answered as the server would (500), named here
        error = ApiError(500, f"{type(e).__name__}: {e}", type=SERVER, code="internal_error")
        return Outcome(request, response_record(request.custom_id, 500, error.body()), 500, error.message)
    return Outcome(request, response_record(request.custom_id, 200, body), 200)


def run_all(requests: list[Request], one: Callable[..., Outcome], n_parallel: int) -> Iterator[Outcome]:
    """Each request's outcome as it finishes. ``n_parallel`` 1: one after
    the other in this thread; more: from that many threads, and when the
    consumer stops early (Ctrl-C), the waiting ones are dropped and the
    running ones end within one target pass."""
    if n_parallel == 1:
        for request in requests:
            yield one(request)
        return
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=n_parallel, thread_name_prefix="specllama-batch") as pool:
        futures = [pool.submit(one, request, stop) for request in requests]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            for future in futures:  # first, so that no waiting request starts once the running ones end
                future.cancel()
            stop.set()


# -- writing -----------------------------------------------------------------


def response_record(custom_id: str, status: int, body: dict) -> dict:
    """An output line for a request that was made (OpenAI's batch output)."""
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id,
            "response": {"status_code": status, "request_id": uuid.uuid4().hex, "body": body}, "error": None}


def error_record(custom_id: str, code: str, message: str) -> dict:
    """An output line for a line that was no request (OpenAI's non-HTTP error)."""
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id, "response": None,
            "error": {"code": code, "message": message}}


@contextmanager
def open_output(path: str, keep_bytes: int | None) -> Iterator[BinaryIO]:
    """The output file open for appending (made if missing), cut back to
    ``keep_bytes`` first when its last line was left unfinished."""
    try:
        out = open(path, "ab")
    except OSError as e:
        raise SpecLlamaError(f"cannot write the output file {path!r}: {e.strerror or e}", param="output") from None
    with out:
        if keep_bytes is not None:
            out.truncate(keep_bytes)
        elif out.tell() > 0 and not _ends_with_newline(path):
            out.write(b"\n")
        yield out


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def write_line(out: BinaryIO, record: dict) -> None:
    """One JSON line, flushed: a run killed after this keeps it whole."""
    text = json.dumps(record, ensure_ascii=False)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in an echoed value: JSON's escapes carry it
        data = json.dumps(record).encode("ascii")
    out.write(data + b"\n")
    out.flush()


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(value: object, limit: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
