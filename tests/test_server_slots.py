"""``specllama serve -np N``: requests in parallel slots, through a real server process and the real
``openai`` client, on the tiny pair."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import openai
import pytest

from .server_helpers import ServerProcess, metric_samples, sse_json

THREADS = ["-t", "1"]
LONG_CTX = 16384
NO_EOS = {"2": -100}  # the tiny vocabulary's </s>, biased away where a request must run long
COMPLETIONS = "/v1/completions"
TOPICS = ["the king", "a cat", "the old tree", "our house"]


@pytest.fixture(scope="module")
def four(tiny_pair, tmp_path_factory):
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "4096", "-np", "4", "-s", "0", *THREADS],
                         tmp_path_factory.mktemp("np4"))
    yield proc
    proc.stop()


def _chat(client, topic: str) -> str:
    stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": f"tell of {topic}"}],
                                            max_tokens=40, temperature=0, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_four_streamed_chats_at_once_each_equal_their_solo_run(four):
    client = openai.OpenAI(base_url=f"{four.url}/v1", api_key="none", max_retries=0, timeout=120)
    solo = [_chat(client, t) for t in TOPICS]
    before = metric_samples(httpx.get(four.url + "/metrics").text)
    together: list = [None] * 4
    threads = [threading.Thread(target=lambda i=i: together.__setitem__(i, _chat(client, TOPICS[i])))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert together == solo and len(set(solo)) == 4
    after = metric_samples(httpx.get(four.url + "/metrics").text)
    assert after["specllama_slots"] == 4 and after["specllama_requests_running"] == 0
    passes = after["specllama_batch_target_passes_total"] - before["specllama_batch_target_passes_total"]
    rows = after["specllama_batch_target_rows_total"] - before["specllama_batch_target_rows_total"]
    assert rows > 1.5 * passes  # the four shared their target passes


def test_slots_endpoint_in_llama_servers_shape(four):
    slots = httpx.get(four.url + "/slots").json()
    assert [s["id"] for s in slots] == [0, 1, 2, 3]
    assert all(s["n_ctx"] == 4096 and s["is_processing"] is False and s["speculative"] is True for s in slots)


class _Long:
    """A long stream that has started (two data lines read)."""

    def __init__(self, url: str, seed: int) -> None:
        self.client = httpx.Client(timeout=60)
        body = {"prompt": "once upon a time", "max_tokens": LONG_CTX // 2 - 100, "temperature": 0.8, "seed": seed,
                "logit_bias": NO_EOS, "stream": True}
        self.response = self.client.send(self.client.build_request("POST", url + COMPLETIONS, json=body), stream=True)
        self.lines = self.response.iter_lines()
        self.seen = [line for line in self._data(2)]

    def _data(self, n: int):
        while n:
            line = next(self.lines)
            if line.startswith("data: "):
                n -= 1
                yield line

    def rest(self) -> list[str]:
        return self.seen + list(self.lines)

    def close(self) -> None:
        self.response.close()
        self.client.close()


def test_beyond_the_slots_and_the_queue_a_request_gets_503(tiny_pair, tmp_path):
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", str(LONG_CTX), "-np", "2", "--max-queue",
                          "0", *THREADS], tmp_path)
    try:
        running = [_Long(proc.url, seed) for seed in (1, 2)]
        slots = httpx.get(proc.url + "/slots").json()
        assert [s["is_processing"] for s in slots] == [True, True]
        full = httpx.post(proc.url + COMPLETIONS, json={"prompt": "a", "max_tokens": 4}, timeout=10)
        assert full.status_code == 503 and full.headers["retry-after"] == "5"
        running[0].close()  # its slot frees within a pass
        deadline = time.monotonic() + 20
        while httpx.get(proc.url + "/metrics").text.count("specllama_requests_running 1") == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ok = httpx.post(proc.url + COMPLETIONS, json={"prompt": "a", "max_tokens": 4, "temperature": 0}, timeout=60)
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 4
        running[1].close()
    finally:
        proc.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_shutdown_with_every_slot_busy_loses_nothing_sent(tiny_pair, tmp_path, sig):
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", str(LONG_CTX), "-np", "2", *THREADS],
                         tmp_path)
    try:
        running = [_Long(proc.url, seed) for seed in (3, 4)]
        proc.signal(sig)
        for stream in running:
            events, done = sse_json(stream.rest())
            assert done == "[DONE]" and events[-1]["error"]["code"] == "shutting_down"
            texts = [e["choices"][0]["text"] for e in events[:-1]]
            assert len(texts) >= 2 and all(isinstance(t, str) for t in texts)  # every chunk sent is whole JSON
            stream.close()
        assert proc.wait(30) == 0
    finally:
        proc.stop()
