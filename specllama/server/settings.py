"""What a running server was told: its address, its limits, and the
sampling values a request gets for the fields it omits.

Plain data and named constants only (no FastAPI, no llama_cpp), so the
click command can import it without slowing ``specllama --help``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..sampling import DEFAULT_MIN_P, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P

DEFAULT_HOST = "127.0.0.1"  # loopback only unless --host says otherwise
DEFAULT_PORT = 8080  # llama-server's
DEFAULT_MAX_QUEUE = 16  # requests waiting behind the running ones
DEFAULT_PARALLEL = 4  # requests running at once (llama-server's default slots)
MAX_BODY_BYTES = 8 * 1024 * 1024  # a larger request body gets 413
RETRY_AFTER_SECONDS = 5  # the Retry-After of a 503 when the queue is full
SHUTDOWN_GRACE_SECONDS = 5.0  # how long a stream may take to say goodbye on SIGINT/SIGTERM
#: the web page's files (HTML, CSS, JavaScript; no build step), served at /
WEB_DIR = str(Path(__file__).resolve().parent.parent / "web")
#: API endpoints that need the key; everything else (/health, the web page) stays open
PROTECTED_PREFIXES = ("/v1/", "/tokenize", "/detokenize", "/metrics", "/slots", "/infill", "/completion")


@dataclass(frozen=True)
class RequestDefaults:
    """The value of each sampling field a request leaves out (the server's
    flags, llama.cpp's defaults unless changed). ``max_tokens`` None: until
    the model stops or the context is full (llama-server's ``-n -1``)."""

    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = DEFAULT_TOP_K
    top_p: float = DEFAULT_TOP_P
    min_p: float = DEFAULT_MIN_P
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    max_tokens: int | None = None

    @classmethod
    def from_flags(cls, o: dict, max_tokens: int | None) -> "RequestDefaults":
        """The sampling flags of ``specllama serve`` or ``batch`` (click's values by name), and ``-n``."""
        return cls(temperature=o["temperature"], top_k=o["top_k"], top_p=o["top_p"], min_p=o["min_p"],
                   repeat_penalty=o["repeat_penalty"], presence_penalty=o["presence_penalty"],
                   frequency_penalty=o["frequency_penalty"], max_tokens=max_tokens)

    def sampling(self) -> dict:
        """The sampling fields as API keyword arguments."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p,
                "repeat_penalty": self.repeat_penalty, "presence_penalty": self.presence_penalty,
                "frequency_penalty": self.frequency_penalty}


@dataclass(frozen=True)
class ServerSettings:
    """Everything about the HTTP surface that is not the model.

    Attributes:
        alias: the model id the server reports (``/v1/models``, ``model`` in responses).
        api_key: None: no key needed; else ``Authorization: Bearer KEY``.
        max_queue: requests that may wait behind the running one (more get 503).
        cors_origins: origins allowed cross-origin access (none: no CORS headers).
        defaults: values for the sampling fields a request omits.
        static_dir: a folder served at ``/`` (the web page; None: no page).
        max_body_bytes: request bodies beyond this get 413.
    """

    alias: str
    api_key: str | None = None
    max_queue: int = DEFAULT_MAX_QUEUE
    cors_origins: tuple[str, ...] = ()
    defaults: RequestDefaults = field(default_factory=RequestDefaults)
    static_dir: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
