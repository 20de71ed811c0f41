"""The target on llama.cpp RPC servers: real `specllama rpc-server` processes on
real ports, the suite's tiny GGUF models loaded through them.

Without an RPC build of llama-cpp-python the tests that need one skip, saying
why; SPECLLAMA_REQUIRE_RPC=1 (CI sets it) makes them fail instead.

The exactness checks are the local ones (tests/test_engine_llama.py) with the
target's layers on a server: greedy output token for token against local
target-only decoding, and the first two tokens' joint law by chi-square at a
fixed seed, with the same stated power.

One RPC server serves one client connection at a time, and a model holds its
connection while it is loaded: each test that runs a second process against a
server starts its own server.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specllama import SpeculativeLlama
from specllama.backend import LlamaModel, supports_rpc
from specllama.backend.rpc import CONNECT_TIMEOUT, probe, rebuild_command
from specllama.engine import SpeculativeEngine
from specllama.errors import SpecLlamaError
from specllama.generation import generate
from specllama.options import check_rpc_servers, check_tensor_split
from specllama.sampling import SamplingParams

from .cli_helpers import invoke
from .conftest import TINY_CTX
from .port_process import PortProcess, free_port
from .two_token_law import FILTERED, PROMPT, check_exact

REQUIRE_RPC = os.environ.get("SPECLLAMA_REQUIRE_RPC") == "1"
HAS_RPC = supports_rpc()
NO_RPC_REASON = (f"this llama-cpp-python has no RPC backend (rebuild it: {rebuild_command()}); "
                 "SPECLLAMA_REQUIRE_RPC=1 makes this a failure")
needs_rpc = pytest.mark.skipif(not HAS_RPC and not REQUIRE_RPC, reason=NO_RPC_REASON)
GREEDY = SamplingParams(temperature=0)
STARTUP_SECONDS = 30.0
STOP_SECONDS = 10.0


class RpcServer(PortProcess):
    """``python -m specllama rpc-server -p PORT -t 1 EXTRA`` until :meth:`stop`,
    started once it answers a handshake; its output in a file (:meth:`output`)."""

    name = "rpc-server"
    startup_seconds = STARTUP_SECONDS
    stop_seconds = STOP_SECONDS

    def __init__(self, log_dir: Path, *extra: str) -> None:
        if not HAS_RPC:
            pytest.fail(f"SPECLLAMA_REQUIRE_RPC=1, but {NO_RPC_REASON.split(';')[0]}")
        self.extra = extra
        super().__init__(log_dir)
        self.endpoint = f"127.0.0.1:{self.port}"

    def command(self, port: int) -> list[str]:
        return ["rpc-server", "-p", str(port), "-t", "1", *self.extra]

    def ready(self) -> bool:
        try:
            probe(f"127.0.0.1:{self.port}", timeout=1.0)  # what a client checks first: connect and handshake
            return True
        except SpecLlamaError:
            return False


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not HAS_RPC and not REQUIRE_RPC:
        pytest.skip(NO_RPC_REASON)
    s = RpcServer(tmp_path_factory.mktemp("rpc"))
    yield s
    s.stop()


@pytest.fixture
def own_server(tmp_path):
    """A server for one test (one that a second process uses, or that it stops)."""
    if not HAS_RPC and not REQUIRE_RPC:
        pytest.skip(NO_RPC_REASON)
    s = RpcServer(tmp_path)
    yield s
    s.stop()


def rpc_engine(tiny_pair, endpoint: str, *, draft_rpc: tuple[str, ...] = ()) -> SpeculativeEngine:
    """The tiny pair with every target layer on ``endpoint`` (one thread each, as the local tests)."""
    target, draft = tiny_pair
    t = LlamaModel(target, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=99, rpc_servers=(endpoint,))
    try:
        d = LlamaModel(draft, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=99 if draft_rpc else 0,
                       rpc_servers=draft_rpc)
    except BaseException:
        t.close()  # else the server stays held by this process, and looks busy to every later test
        raise
    return SpeculativeEngine(t, d)


@pytest.fixture(scope="module")
def local_greedy(tiny_pair):
    """Local target-only greedy decoding: the reference, 64 tokens."""
    target, _ = tiny_pair
    engine = SpeculativeEngine(LlamaModel(target, n_ctx=TINY_CTX, n_threads=1), None)
    try:
        return generate(engine, PROMPT, params=GREEDY, draft_max=0, max_tokens=64)
    finally:
        engine.close()


def tiny_cli(tiny_pair, *extra: str) -> list[str]:
    target, draft = tiny_pair
    return ["-m", target, "-md", draft, "-c", str(TINY_CTX), "-t", "1", *extra]


# -- the options, checked before anything loads (no RPC build needed) -----------

def test_endpoints_are_checked_and_normalised():
    assert check_rpc_servers(None) == ()
    assert check_rpc_servers("127.0.0.1:50052") == ("127.0.0.1:50052",)
    assert check_rpc_servers("a:1, b:02") == ("a:1", "b:2")
    assert check_rpc_servers(["a:1,b:2", "c:3"]) == ("a:1", "b:2", "c:3")
    for bad in ("127.0.0.1", ":50052", "a:0", "a:65536", "a:x", "a:1,", "my host:1"):
        with pytest.raises(SpecLlamaError) as e:
            check_rpc_servers(bad, "--rpc")
        part = bad.split(",")[-1].strip() if bad != "a:1," else ""
        assert str(e.value) == (f"--rpc: {part!r} is not HOST:PORT (an IPv4 address or host name, a port in "
                                "1..65535, e.g. 127.0.0.1:50052; several: comma-separated)")
    with pytest.raises(SpecLlamaError, match=r"^rpc_servers: a:1 is named twice$"):
        check_rpc_servers("a:1,a:1")
    with pytest.raises(SpecLlamaError, match=r"^rpc_servers: 17 servers; llama.cpp takes at most 16$"):
        check_rpc_servers([f"h:{i}" for i in range(1, 18)])
    with pytest.raises(SpecLlamaError, match=r"^rpc_servers must be a string HOST:PORT"):
        check_rpc_servers(50052)


def test_tensor_split_is_checked():
    assert check_tensor_split(None) is None
    assert check_tensor_split("3,1") == (3.0, 1.0)
    assert check_tensor_split("3/1") == (3.0, 1.0)
    assert check_tensor_split([1, 0.5]) == (1.0, 0.5)
    assert check_tensor_split("0,0") == (0.0, 0.0)  # llama.cpp's default: by free memory
    for bad, shown in (("3,x", "'x'"), ("-1", "-1.0"), ([float("nan")], "nan")):
        with pytest.raises(SpecLlamaError) as e:
            check_tensor_split(bad, "--tensor-split")
        assert str(e.value) == (f"--tensor-split: {shown} is not a share >= 0 (e.g. '3,1': three quarters of the "
                                "layers on the first device)")
    with pytest.raises(SpecLlamaError, match=r"^tensor_split: 17 shares; llama.cpp takes at most 16 devices$"):
        check_tensor_split([1] * 17)


def test_a_bad_flag_is_one_line_before_anything_loads(tiny_pair):
    r = invoke("generate", *tiny_cli(tiny_pair, "--rpc", "127.0.0.1", "-p", "x"))
    assert r.exit_code == 2
    assert r.stderr == ("Error: Invalid value for '--rpc': '127.0.0.1' is not HOST:PORT (an IPv4 address or host "
                        "name, a port in 1..65535, e.g. 127.0.0.1:50052; several: comma-separated)\n")


def test_without_an_rpc_build_the_flags_say_how_to_rebuild(tiny_pair, monkeypatch):
    """On a build without RPC this runs as it is; on one with RPC (CI's), llama.cpp's own answer to
    "is RPC compiled in?" is made "no", the one thing such a build says differently."""
    if HAS_RPC:
        import llama_cpp

        monkeypatch.setattr(llama_cpp, "llama_supports_rpc", lambda: False)
    r = invoke("generate", *tiny_cli(tiny_pair, "--rpc", "127.0.0.1:50052", "-ngl", "99",
                                     "-p", "x"))
    assert r.exit_code == 1
    assert r.stderr == ("Error: --rpc needs llama-cpp-python built with llama.cpp's RPC backend, and this build has "
                        f"none; rebuild it: {rebuild_command()}\n")
    r = invoke("rpc-server")
    assert r.exit_code == 1
    assert r.stderr.startswith("Error: rpc-server needs llama-cpp-python built with llama.cpp's RPC backend")


def test_the_rebuild_command_names_this_version():
    import importlib.metadata

    assert rebuild_command() == ('CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir --no-deps '
                                 f'"llama-cpp-python=={importlib.metadata.version("llama-cpp-python")}"')


# -- unreachable servers: found before loading, one line naming the endpoint -------

@needs_rpc
def test_a_refused_connection_is_one_line_naming_the_endpoint(tiny_pair):
    port = free_port()  # nothing listens there
    r = invoke("generate", *tiny_cli(tiny_pair, "--rpc", f"127.0.0.1:{port}", "-ngl", "99",
                                     "-p", "x"))
    assert r.exit_code == 1
    assert r.stdout == ""
    assert r.stderr == (f"Error: cannot reach the RPC server at 127.0.0.1:{port}: connection refused (nothing "
                        f"listens there; start `specllama rpc-server --host HOST --port {port}` on that machine)\n")


@pytest.mark.slow  # waits out the real 5 s timeout
@needs_rpc
def test_a_server_that_never_answers_times_out_naming_the_endpoint(tiny_pair):
    """A port that accepts connections but never answers (a server busy with
    another client looks so): the handshake times out, nothing loads."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        endpoint = f"127.0.0.1:{listener.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(SpecLlamaError) as e:
            SpeculativeLlama(*tiny_pair, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=-1, rpc_servers=endpoint)
        assert CONNECT_TIMEOUT <= time.monotonic() - t0 < CONNECT_TIMEOUT + 15  # a busy machine is slow
    assert str(e.value) == (f"the RPC server at {endpoint} accepted the connection but did not answer within 5 s "
                            "(a ggml RPC server serves one client at a time: is another process using it?)")


@needs_rpc
def test_a_server_of_another_kind_is_named(tiny_pair):
    """Something that accepts and hangs up at once (not a ggml RPC server)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        endpoint = f"127.0.0.1:{listener.getsockname()[1]}"

        def hang_up():
            conn, _ = listener.accept()
            conn.close()

        threading.Thread(target=hang_up, daemon=True).start()
        with pytest.raises(SpecLlamaError) as e:
            SpeculativeLlama(*tiny_pair, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=-1, rpc_servers=[endpoint])
    assert str(e.value) == (f"the RPC server at {endpoint} did not answer as a ggml RPC server of protocol 7.x (is "
                            "it `specllama rpc-server`, or llama.cpp's rpc-server of the same version?)")


# -- the target on a server: exactly what it is locally ---------------------------

@needs_rpc
def test_the_target_loads_onto_the_server_and_the_draft_stays_local(tiny_pair, server, capsys):
    target, draft = tiny_pair
    t = LlamaModel(target, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=99, rpc_servers=(server.endpoint,),
                   verbose=True)
    d = LlamaModel(draft, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=99, verbose=True)
    t.close()
    d.close()
    log = capsys.readouterr().err
    target_log, draft_log = log.split("tiny-draft.gguf", 1)
    # llama.cpp's own load log says where the weights and the KV cache went
    assert f"RPC0[{server.endpoint}] model buffer size" in target_log
    assert f"RPC0[{server.endpoint}] KV buffer size" in target_log
    assert "offloaded 3/3 layers to GPU" in target_log
    assert "RPC" not in draft_log  # -ngl 99, and still every draft layer on the CPU
    assert "CPU KV buffer size" in draft_log
    assert t.devices == [f"RPC0 ({server.endpoint})"] and d.devices == []


@needs_rpc
@pytest.mark.parametrize("k", [1, 4, 8])
def test_greedy_through_rpc_equals_local_target_only(tiny_pair, server, local_greedy, k):
    engine = rpc_engine(tiny_pair, server.endpoint)
    try:
        target_only = generate(engine, PROMPT, params=GREEDY, draft_max=0, max_tokens=64)
        spec = generate(engine, PROMPT, params=GREEDY, draft_max=k, max_tokens=64, adaptive=False)
        spec_block = generate(engine, PROMPT, params=GREEDY, draft_max=k, max_tokens=64, rule="block")
    finally:
        engine.close()
    assert len(local_greedy.tokens) == 64
    assert target_only.tokens == local_greedy.tokens
    assert spec.tokens == local_greedy.tokens and spec.text == local_greedy.text
    assert spec_block.tokens == local_greedy.tokens
    assert 0 < spec.stats.n_accepted < spec.stats.n_drafted  # both the accept and the reject paths ran
    assert spec.stats.n_target_passes < 64


@needs_rpc
def test_draft_on_the_server_too(tiny_pair, server, local_greedy):
    """--rpc-draft: both models on one server (they share its one connection)."""
    engine = rpc_engine(tiny_pair, server.endpoint, draft_rpc=(server.endpoint,))
    try:
        assert engine.draft.devices == [f"RPC0 ({server.endpoint})"]
        spec = generate(engine, PROMPT, params=GREEDY, draft_max=4, max_tokens=64, adaptive=False)
    finally:
        engine.close()
    assert spec.tokens == local_greedy.tokens
    assert spec.stats.n_accepted > 0


@pytest.mark.slow  # the exactness check's 3,000 runs again, through RPC (on the engine itself: test_engine_llama.py)
@needs_rpc
def test_two_token_law_through_rpc_matches_the_target(tiny_pair, server):
    """First and second tokens, jointly, against the law enumerated from the
    target's logits (computed on the server too), at T = 1 without filters,
    token-wise, fixed draft length. N = 3,000 on 108 bins: detects w >= 0.201
    with power 0.99 (the local test's numbers)."""
    engine = rpc_engine(tiny_pair, server.endpoint)
    try:
        check_exact(engine, w_bound=0.201)
    finally:
        engine.close()


@pytest.mark.slow  # the exactness check's 3,000 runs again, through RPC (on the engine itself: test_engine_llama.py)
@needs_rpc
def test_two_token_law_through_rpc_with_filters_and_block_verification(tiny_pair, server):
    """The same at T = 0.8 with top-k 20, top-p 0.9, min-p 0.02, block
    verification. N = 3,000 on 65 bins: detects w >= 0.183."""
    engine = rpc_engine(tiny_pair, server.endpoint)
    try:
        check_exact(engine, w_bound=0.183, params=FILTERED, rule="block")
    finally:
        engine.close()


@needs_rpc
def test_models_that_name_no_server_never_touch_one_that_is_gone(tiny_pair, own_server):
    """Registered servers stay in llama.cpp's registry for the process; a model
    (a plain llama_cpp.Llama too) that names none must not use them, nor ask a
    stopped one anything: llama.cpp would abort this very process."""
    import llama_cpp

    target, draft = tiny_pair
    on_server = LlamaModel(target, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=99, rpc_servers=(own_server.endpoint,))
    on_server.close()
    assert own_server.stop() == 0
    local = LlamaModel(draft, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=99)
    assert local.devices == [] and len(local.eval(local.tokenize(PROMPT))) == 1
    local.close()
    plain = llama_cpp.Llama(model_path=target, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=-1, verbose=False)
    try:
        assert plain.create_completion(PROMPT, max_tokens=4, temperature=0)["usage"]["completion_tokens"] == 4
    finally:
        plain.close()


# -- every surface takes the flags -------------------------------------------------

@needs_rpc
def test_generate_through_rpc_prints_the_local_tokens(tiny_pair, server, local_greedy):
    args = ["generate", *tiny_cli(tiny_pair, "-p", PROMPT, "-n", "64", "--temp", "0", "--json")]
    local = invoke(*args, "--draft-max", "0")
    remote = invoke(*args, "--rpc", server.endpoint, "-ngl", "99")
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    assert json.loads(local.stdout)["tokens"] == local_greedy.tokens
    assert json.loads(remote.stdout)["tokens"] == local_greedy.tokens
    assert json.loads(remote.stdout)["text"] == local_greedy.text
    assert remote.stderr == ""


@needs_rpc
def test_rpc_with_ngl_0_warns_that_everything_stays_local(tiny_pair, server, local_greedy):
    r = invoke("generate", *tiny_cli(tiny_pair, "-p", PROMPT, "-n", "64", "--temp", "0",
                                     "--json", "--rpc", server.endpoint))
    assert r.exit_code == 0, r.output
    assert r.stderr == (f"Warning: the target's layers all stay local: rpc_servers (--rpc {server.endpoint}) with "
                        "n_gpu_layers 0; offload them with -ngl 99 (n_gpu_layers=-1: all)\n")
    assert json.loads(r.stdout)["tokens"] == local_greedy.tokens


def test_rpc_draft_without_a_draft_model_warns_and_contacts_nothing(tiny_pair, local_greedy):
    port = free_port()  # nothing listens there: contacting it would fail the run
    r = invoke("generate", *tiny_cli(tiny_pair, "-p", PROMPT, "-n", "64", "--temp", "0", "--json",
                                     "--draft-max", "0", "--rpc-draft", f"127.0.0.1:{port}"))
    assert r.exit_code == 0, r.output
    assert r.stderr == ("Warning: no draft model loads (no draft, prompt lookup or --draft-max 0), so "
                        f"rpc_servers_draft (--rpc-draft 127.0.0.1:{port}) is not used\n")
    assert json.loads(r.stdout)["tokens"] == local_greedy.tokens


@needs_rpc
def test_a_tensor_split_longer_than_the_devices_is_refused(tiny_pair, server):
    r = invoke("generate", *tiny_cli(tiny_pair, "-p", "x", "--rpc", server.endpoint, "-ngl", "99",
                                     "-ts", "1,1"))
    assert r.exit_code == 1
    assert r.stderr == (f"Error: tensor split gives 2 shares, but {tiny_pair[0]!r} has 1 device to split over: "
                        f"RPC0 ({server.endpoint})\n")


@needs_rpc
def test_chat_through_rpc_gives_the_local_transcript(tiny_pair, server):
    args = ["chat", *tiny_cli(tiny_pair, "-n", "12", "--temp", "0", "--chat-format", "chatml", "--color", "never")]
    script = "hello there\nand again\n/exit\n"
    local = invoke(*args, input=script)
    remote = invoke(*args, "--rpc", server.endpoint, "-ngl", "99", input=script)
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    assert remote.stdout == local.stdout
    assert len(local.stdout.splitlines()) >= 3  # the banner and two replies


@needs_rpc
def test_the_api_takes_rpc_servers(tiny_pair, server):
    with SpeculativeLlama(*tiny_pair, n_ctx=TINY_CTX, n_threads=1, draft_max=0) as llm:
        local = llm.create_completion(PROMPT, max_tokens=48, temperature=0)
    with SpeculativeLlama(*tiny_pair, n_ctx=TINY_CTX, n_threads=1, n_gpu_layers=-1,
                          rpc_servers=[server.endpoint], tensor_split=[1]) as llm:
        assert llm.engine.target.devices == [f"RPC0 ({server.endpoint})"]
        remote = llm.create_completion(PROMPT, max_tokens=48, temperature=0)
    assert remote["choices"][0]["text"] == local["choices"][0]["text"]
    assert remote["usage"] == local["usage"]
    assert remote["speculative"]["n_accepted"] > 0


@needs_rpc
def test_verify_through_rpc_passes_and_replays_with_the_flag(tiny_pair, server):
    r = invoke("verify", *tiny_cli(tiny_pair, "-p", PROMPT, "-s", "5", "-N", "300",
                                   "--rpc", server.endpoint, "-ngl", "99", "--json"))
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["verdict"] == "PASS"
    assert data["settings"]["rpc"] == server.endpoint and "rpc_draft" not in data["settings"]
    r = invoke("verify", *tiny_cli(tiny_pair, "-p", PROMPT, "-s", "5", "-N", "300",
                                   "--rpc", server.endpoint, "-ngl", "99"))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert next(line for line in lines if line.startswith("load ")) == (
        f"load         context {TINY_CTX}, GPU layers 99 (draft: as the target), threads 1, RPC servers "
        f"{server.endpoint}")
    replay = next(line for line in lines if line.startswith("replay "))
    assert f" -ngl 99 -t 1 --rpc {server.endpoint} -N 300 -s 5 " in replay


@needs_rpc
def test_bench_through_rpc(tiny_pair, server):
    r = invoke("bench", *tiny_cli(tiny_pair, "--rpc", server.endpoint, "-ngl", "99", "--quick",
                                  "--only", "story,qa", "-n", "8", "--temp", "0", "--no-baseline",
                                  "--json"))
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert {row["draft_max"] for row in rows} == {4}
    assert all(row["target_tps"] > 0 and row["spec_tps"] > 0 for row in rows)


@needs_rpc
def test_serve_through_rpc_answers_as_local_decoding(tiny_pair, own_server, tmp_path):
    """`specllama serve --rpc`: a real server process whose target is on a real
    RPC server process, through the official openai client."""
    from openai import OpenAI

    from .server_helpers import ServerProcess

    with SpeculativeLlama(*tiny_pair, n_ctx=TINY_CTX, n_threads=1, draft_max=0, convention="openai") as llm:
        local = llm.create_completion(PROMPT, max_tokens=32, temperature=0)["choices"][0]["text"]
    served = ServerProcess([*tiny_cli(tiny_pair, "--rpc", own_server.endpoint, "-ngl", "99")], tmp_path)
    try:
        client = OpenAI(base_url=f"{served.url}/v1", api_key="none")
        reply = client.completions.create(model="any", prompt=PROMPT, max_tokens=32, temperature=0)
        assert reply.choices[0].text == local
    finally:
        served.stop()


# -- the server process --------------------------------------------------------------

@needs_rpc
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_rpc_server_stops_on_a_signal(tmp_path, sig):
    s = RpcServer(tmp_path)
    assert s.stop(sig) == 0
    lines = s.output().splitlines()
    assert lines[0] == (f"specllama rpc-server: {s.endpoint}, devices CPU; never expose an RPC server to an open "
                        "network (no authentication: anyone who reaches it can use its devices and memory); it "
                        "listens on 127.0.0.1 only unless --host says otherwise. Stop with Ctrl-C or SIGTERM.")
    assert "Starting RPC server v7.0.0" in lines
    assert f"  endpoint       : {s.endpoint}" in lines
    assert lines[-1] == f"specllama rpc-server: stopped ({signal.Signals(sig).name})"
    with socket.socket() as again:  # the port is free: nothing is left listening
        again.bind(("127.0.0.1", s.port))


@needs_rpc
def test_rpc_server_on_every_interface_prints_llama_cpps_warning(tmp_path):
    s = RpcServer(tmp_path, "--host", "0.0.0.0")
    assert s.stop() == 0
    out = s.output()
    assert out.startswith("\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
                          "WARNING: Host ('0.0.0.0') is != '127.0.0.1'\n"
                          "         Never expose the RPC server to an open network!\n"
                          "         This is an experimental feature and is not secure!\n"
                          "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
                          f"specllama rpc-server: 0.0.0.0:{s.port}, devices CPU; never expose")


@needs_rpc
def test_rpc_server_refuses_a_busy_port_and_a_host_name(server):
    r = invoke("rpc-server", "-p", str(server.port))
    assert r.exit_code == 1
    assert r.stderr == f"Error: cannot listen on 127.0.0.1:{server.port}: Address already in use\n"
    r = invoke("rpc-server", "--host", "localhost")
    assert r.exit_code == 1
    assert r.stderr == ("Error: --host 'localhost' is not an IPv4 address (llama.cpp's RPC server binds IPv4 only: "
                        "e.g. 127.0.0.1, or 0.0.0.0 for every interface)\n")


@needs_rpc
def test_a_server_that_dies_mid_generation_ends_the_client_naming_it(tiny_pair, own_server):
    """llama.cpp's RPC client aborts when its server goes: the client process
    ends at once, exit status 1, its last line naming the endpoint."""
    client = subprocess.Popen([sys.executable, "-m", "specllama", "generate",
                               *tiny_cli(tiny_pair, "-c", "4096", "-p", PROMPT, "-n", "-1", "--ignore-eos",
                                         "--draft-max", "0", "--rpc", own_server.endpoint, "-ngl", "99")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready, _, _ = select.select([client.stdout], [], [], 120)
        assert ready and os.read(client.stdout.fileno(), 64)  # it is generating
        assert own_server.stop(signal.SIGKILL) == -signal.SIGKILL
        _, err = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 1
    assert err.decode().splitlines()[-1] == (
        f"Error: lost the RPC server at {own_server.endpoint} (llama.cpp's RPC client cannot recover, so the "
        "process ends here; restart the server and run again)")
