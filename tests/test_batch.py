"""``specllama batch`` as a real process on the tiny pair: OpenAI's batch
output read back line by line and held against the API's own answers, a
file with bad lines, a resumed run; and the threads' runner alone."""

from __future__ import annotations

import json
import threading
import time

import pytest

from specllama import SpeculativeLlama
from specllama.batch_run import Batch, Outcome, Request, run_all
from specllama.server.settings import RequestDefaults

from .cli_helpers import invoke, one_line_error, run_cli

CTX = 512
MODEL_FLAGS = ["-c", str(CTX), "-t", "1", "--draft-fixed", "--draft-max", "3", "-s", "0"]
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
# the fields of an answer that differ between two runs of one request
PER_RUN = ("id", "created", "model", "timings")

REQUESTS = [
    {"custom_id": "chat-1", "method": "POST", "url": CHAT,
     "body": {"model": "any", "messages": [{"role": "user", "content": "once upon a time"}], "max_tokens": 12,
              "temperature": 0}},
    {"custom_id": "text-1", "method": "POST", "url": COMPLETIONS,
     "body": {"prompt": "once upon a time there lived a king", "max_tokens": 10, "temperature": 0}},
    {"custom_id": "chat-2", "method": "POST", "url": CHAT,
     "body": {"messages": [{"role": "system", "content": "be a king"}, {"role": "user", "content": "the king"}],
              "max_completion_tokens": 9, "temperature": 0, "stop": ["queen"]}},
    {"custom_id": "text-2", "method": "POST", "url": COMPLETIONS,
     "body": {"prompt": "the old man", "max_tokens": 7, "temperature": 0}},
]


def write_jsonl(path, lines) -> str:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_batch(tiny_pair, requests: str, output, *flags: str):
    return run_cli("batch", requests, "-o", str(output), "-m", tiny_pair[0], "-md", tiny_pair[1], *MODEL_FLAGS,
                   *flags, text=True)


def same_run(body: dict) -> dict:
    """An answer without what changes from run to run."""
    return {k: v for k, v in body.items() if k not in PER_RUN}


def by_id(records: list[dict]) -> dict[str, dict]:
    found = {r["custom_id"]: r for r in records}
    assert len(found) == len(records), "a custom_id was written twice"
    return found


@pytest.fixture(scope="module")
def api(tiny_pair):
    """The pair as the batch opens it, in this process."""
    with SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=CTX, n_threads=1, adaptive=False, draft_max=3, seed=0,
                          convention="openai") as llm:
        yield llm


def api_answer(llm: SpeculativeLlama, request: dict) -> dict:
    body = dict(request["body"])
    body.pop("model", None)
    if request["url"] == CHAT:
        body["max_tokens"] = body.pop("max_completion_tokens", body.get("max_tokens"))
        return llm.create_chat_completion(**body)
    return llm.create_completion(**body)


def test_the_output_read_back_holds_the_apis_answers(tiny_pair, api, tmp_path):
    out = tmp_path / "results.jsonl"
    proc = run_batch(tiny_pair, write_jsonl(tmp_path / "requests.jsonl", REQUESTS), out, "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == f"batch: 4 answered; answers in {out}"
    records = read_jsonl(out)
    assert sorted(r["custom_id"] for r in records) == ["chat-1", "chat-2", "text-1", "text-2"]
    written = by_id(records)
    for request in REQUESTS:
        record = written[request["custom_id"]]
        assert set(record) == {"id", "custom_id", "response", "error"}
        assert record["id"].startswith("batch_req_") and record["error"] is None
        response = record["response"]
        assert set(response) == {"status_code", "request_id", "body"} and response["status_code"] == 200
        assert isinstance(response["request_id"], str) and response["request_id"]
        body = response["body"]
        assert body["model"] == "tiny-target.gguf" and "timings" in body  # as `specllama serve` answers
        expected = api_answer(api, request)
        assert body["object"] == ("chat.completion" if request["url"] == CHAT else "text_completion")
        assert same_run(body) == same_run(expected)
    assert written["text-2"]["response"]["body"]["usage"]["completion_tokens"] == 7
    assert len({r["id"] for r in records}) == 4 and len({r["response"]["request_id"] for r in records}) == 4


def test_a_bad_line_is_named_by_its_number_and_the_others_run(tiny_pair, tmp_path):
    good, other = REQUESTS[1], REQUESTS[3]
    lines = [
        good,                                                                        # 1
        "{not json",                                                                 # 2
        {"method": "POST", "url": COMPLETIONS, "body": {"prompt": "x"}},             # 3: no custom_id
        {"custom_id": "get", "method": "GET", "url": COMPLETIONS, "body": {}},       # 4
        {"custom_id": "embed", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}},  # 5
        {"custom_id": "list", "method": "POST", "url": CHAT, "body": ["x"]},         # 6
        dict(other, custom_id=good["custom_id"]),                                    # 7: a duplicate
        {"custom_id": "hot", "method": "POST", "url": COMPLETIONS,
         "body": {"prompt": "x", "temperature": -1}},                                # 8: the API refuses it
        "",                                                                          # 9: blank, passed over
        other,                                                                       # 10
    ]
    requests = write_jsonl(tmp_path / "requests.jsonl", lines)
    (tmp_path / "requests.jsonl").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "requests.jsonl").read_bytes())  # a BOM
    out = tmp_path / "results.jsonl"
    proc = run_batch(tiny_pair, requests, out)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"{requests}:2: not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"{requests}:3: custom_id missing",
        f'{requests}:4: method must be "POST", got "GET"',
        f"{requests}:5: url must be '/v1/completions' or '/v1/chat/completions', got \"/v1/embeddings\"",
        f'{requests}:6: body must be a JSON object (the request body), got ["x"]',
        f"{requests}:7: custom_id 'text-1' is used by line 1 already (each request needs its own)",
        f"{requests}:8: temperature must be a finite number >= 0 and <= 2, got -1.0",
        f"batch: 2 answered, 7 failed (lines 2, 3, 4, 5, 6, 7, 8); answers in {out}",
    ]
    written = by_id(read_jsonl(out))
    assert sorted(written) == ["embed", "get", "hot", "list", "text-1", "text-2"]
    assert written["text-1"]["response"]["status_code"] == written["text-2"]["response"]["status_code"] == 200
    assert {cid: (written[cid]["response"], written[cid]["error"]["code"]) for cid in ("get", "embed", "list")} == {
        "get": (None, "invalid_method"), "embed": (None, "invalid_url"), "list": (None, "invalid_body")}
    refused = written["hot"]
    assert refused["error"] is None and refused["response"]["status_code"] == 400
    assert refused["response"]["body"] == {"error": {
        "message": "temperature must be a finite number >= 0 and <= 2, got -1.0", "type": "invalid_request_error",
        "param": "temperature", "code": "invalid_value"}}


def test_a_resumed_run_skips_what_is_written_and_completes(tiny_pair, tmp_path):
    requests = write_jsonl(tmp_path / "requests.jsonl", REQUESTS)
    full = tmp_path / "full.jsonl"
    assert run_batch(tiny_pair, requests, full).returncode == 0
    first, second = full.read_text().splitlines()[:2]
    # a run killed while writing its second line: the first is whole, the second cut short
    out = tmp_path / "results.jsonl"
    out.write_text(first + "\n" + second[: len(second) // 2])
    proc = run_batch(tiny_pair, requests, out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [f"skipping 1 request already in {out}",
                                        f"batch: 3 answered, 1 skipped (already in {out}); answers in {out}"]
    assert out.read_text().startswith(first + "\n")
    resumed = by_id(read_jsonl(out))
    assert resumed.keys() == by_id(read_jsonl(full)).keys()
    for custom_id, record in by_id(read_jsonl(full)).items():
        assert same_run(resumed[custom_id]["response"]["body"]) == same_run(record["response"]["body"])
    # once everything is there, nothing runs
    again = run_batch(tiny_pair, requests, out)
    assert again.returncode == 0 and again.stderr.splitlines()[-1] == (
        f"batch: 0 answered, 4 skipped (already in {out}); answers in {out}")
    assert len(read_jsonl(out)) == 4


def test_a_failed_answer_already_written_keeps_the_exit_status_nonzero(tiny_pair, tmp_path):
    hot = {"custom_id": "hot", "method": "POST", "url": COMPLETIONS, "body": {"prompt": "x", "top_k": -1}}
    requests = write_jsonl(tmp_path / "requests.jsonl", [hot])
    out = tmp_path / "results.jsonl"
    assert run_batch(tiny_pair, requests, out).returncode == 1
    again = run_batch(tiny_pair, requests, out)
    assert again.returncode == 1 and again.stderr.splitlines()[-1] == (
        f"batch: 0 answered, 1 skipped (already in {out}, 1 of them failed); answers in {out}")


def test_parallel_slots_give_the_same_answers_at_temperature_0(tiny_pair, tmp_path):
    requests = write_jsonl(tmp_path / "requests.jsonl", REQUESTS)
    one, two = tmp_path / "np1.jsonl", tmp_path / "np2.jsonl"
    assert run_batch(tiny_pair, requests, one, "-np", "1").returncode == 0
    proc = run_batch(tiny_pair, requests, two, "-np", "2")
    assert proc.returncode == 0, proc.stderr
    solo, parallel = by_id(read_jsonl(one)), by_id(read_jsonl(two))
    assert solo.keys() == parallel.keys()
    for custom_id, record in solo.items():
        a, b = record["response"]["body"], parallel[custom_id]["response"]["body"]
        assert a["choices"] == b["choices"] and a["usage"] == b["usage"]


def test_answers_from_threads_are_the_answers_of_one(tiny_pair, tmp_path):
    """The threads' road with today's model (its calls take turns): what
    -np N runs, less the batching of passes."""
    requests = write_jsonl(tmp_path / "requests.jsonl", REQUESTS)

    def run(output, n_parallel: int) -> dict[str, dict]:
        batch = Batch(requests, str(output))
        opened = lambda: SpeculativeLlama(tiny_pair[0], tiny_pair[1], n_ctx=CTX, n_threads=1, adaptive=False,  # noqa: E731
                                          draft_max=3, seed=0, convention="openai")
        outcomes = list(batch.run(opened, defaults=RequestDefaults(), alias=lambda llm: "tiny", n_parallel=n_parallel))
        assert [o.status for o in outcomes] == [200] * 4 and not batch.failed
        return {cid: same_run(r["response"]["body"]) for cid, r in by_id(read_jsonl(output)).items()}

    assert run(tmp_path / "threads.jsonl", 3) == run(tmp_path / "one.jsonl", 1)


def test_threads_stop_within_a_pass_when_the_run_ends():
    requests = [Request(n, f"r{n}", COMPLETIONS, {}) for n in range(1, 7)]
    started: list[int] = []

    def one(request: Request, stop: threading.Event) -> Outcome:
        started.append(request.line)
        if request.line > 1:
            assert stop.wait(10)  # a generation that goes on until the run ends
        return Outcome(request, {}, 200)

    t0 = time.monotonic()
    outcomes = run_all(requests, one, 2)
    assert next(outcomes).request.line == 1
    outcomes.close()  # the consumer stops (Ctrl-C): the running request ends, the waiting ones never start
    assert time.monotonic() - t0 < 5
    assert set(started) <= {1, 2, 3}  # the first two, and one taken before the end


def test_usage_errors_are_one_line(tmp_path):
    requests = write_jsonl(tmp_path / "requests.jsonl", REQUESTS[:1])
    assert one_line_error(invoke("batch", requests), 2) == "Error: Missing option '-o' / '--output'."
    assert one_line_error(invoke("batch", requests, "-o", requests), 1) == (
        f"Error: -o {requests!r} is the input file: give another output file")
    assert one_line_error(invoke("batch", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "r.jsonl")), 1) == (
        f"Error: cannot read the requests file {str(tmp_path / 'missing.jsonl')!r}: No such file or directory")
    assert one_line_error(invoke("batch", requests, "-o", str(tmp_path / "r.jsonl"), "-np", "0"), 2).startswith(
        "Error: Invalid value for '-np' / '--parallel'")
