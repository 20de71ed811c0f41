"""The one statistics record of a generation, used by every surface (the
CLI's stats line, ``--json``, the API's ``"speculative"`` key, chat's
``/stats``, the bench)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass
class GenerationStats:
    """Counts and timings of one generation (or, added up, of several).

    Attributes:
        n_prompt_tokens: prompt length in tokens.
        n_prompt_evaluated: prompt tokens the target had to evaluate (the
            rest was reused from its KV cache).
        n_tokens: tokens generated (an end-of-generation token excluded).
        n_drafted, n_accepted: draft tokens proposed, and kept by the target.
        n_target_passes: target forward passes while decoding.
        prompt_seconds: time to evaluate the prompt.
        ttft_seconds: time from the start to the first generated token.
        seconds: decoding time (prompt excluded).
        draft_seconds: time spent drafting (inside and outside llama.cpp).
        verify_seconds: time in target passes and the acceptance test.
        draft_decode_seconds, target_decode_seconds: time inside llama.cpp.
        tried_at, accepted_at: per draft position i, how many passes reached
            position i, and how many of them kept its token.
        n_forced_drafted, n_forced_accepted: of the drafts (and of the kept
            ones), those a grammar forced, proposed without the draft model.
        n_lookup_drafted, n_lookup_accepted: of the drafts (and of the kept
            ones), those prompt lookup proposed in place of the draft model's.
        grammar_seconds: time in the grammar (masks, forced tokens, advancing it).
    """

    n_prompt_tokens: int = 0
    n_prompt_evaluated: int = 0
    n_tokens: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_target_passes: int = 0
    prompt_seconds: float = 0.0
    ttft_seconds: float = 0.0
    seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    draft_decode_seconds: float = 0.0
    target_decode_seconds: float = 0.0
    tried_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    n_forced_drafted: int = 0
    n_forced_accepted: int = 0
    n_lookup_drafted: int = 0
    n_lookup_accepted: int = 0
    grammar_seconds: float = 0.0

    def observe_pass(self, n_drafted: int, n_accepted: int, *, forced: bool = False, lookup: bool = False) -> None:
        """Count one target pass: positions 0..n_accepted were reached (the
        last of them rejected unless all k were kept). ``forced``: the drafts
        were a grammar's forced tokens; ``lookup``: prompt lookup's."""
        self.n_target_passes += 1
        self.n_drafted += n_drafted
        self.n_accepted += n_accepted
        if forced:
            self.n_forced_drafted += n_drafted
            self.n_forced_accepted += n_accepted
        if lookup:
            self.n_lookup_drafted += n_drafted
            self.n_lookup_accepted += n_accepted
        for i in range(min(n_accepted + 1, n_drafted)):
            while len(self.tried_at) <= i:
                self.tried_at.append(0)
                self.accepted_at.append(0)
            self.tried_at[i] += 1
            self.accepted_at[i] += i < n_accepted

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted (0 when nothing was drafted)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        """P(position i kept | positions before it kept), as observed."""
        return [a / t if t else 0.0 for a, t in zip(self.accepted_at, self.tried_at)]

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of decoding (prompt processing excluded)."""
        return self.n_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Mean tokens emitted per target forward pass."""
        return self.n_tokens / self.n_target_passes if self.n_target_passes else 0.0

    @property
    def mean_draft_length(self) -> float:
        return self.n_drafted / self.n_target_passes if self.n_target_passes else 0.0

    @property
    def python_seconds(self) -> float:
        """Decoding time outside llama.cpp (the loop, sampling, text)."""
        return max(self.seconds - self.draft_decode_seconds - self.target_decode_seconds, 0.0)

    def __add__(self, other: "GenerationStats") -> "GenerationStats":
        """Totals over several generations (a chat session's, a bench row's)."""
        out = GenerationStats()
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, list):
                n = max(len(a), len(b))
                setattr(out, f.name, [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)])
            else:
                setattr(out, f.name, a + b)
        return out

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(
            acceptance_rate=self.acceptance_rate,
            acceptance_by_position=self.acceptance_by_position,
            tokens_per_second=self.tokens_per_second,
            tokens_per_pass=self.tokens_per_pass,
            python_seconds=self.python_seconds,
        )
        return d

    def speculative(self) -> dict:
        """The ``"speculative"`` key of API and HTTP responses."""
        return {
            "n_drafted": self.n_drafted,
            "n_accepted": self.n_accepted,
            "acceptance_rate": self.acceptance_rate,
            "tokens_per_pass": self.tokens_per_pass,
            "acceptance_by_position": self.acceptance_by_position,
            "n_target_passes": self.n_target_passes,
        }

    def timings(self) -> dict:
        """llama-server's ``timings`` object of a response."""
        return {
            "prompt_n": self.n_prompt_evaluated,
            "prompt_ms": 1000 * self.prompt_seconds,
            "prompt_per_second": self.n_prompt_evaluated / self.prompt_seconds if self.prompt_seconds > 0 else 0.0,
            "predicted_n": self.n_tokens,
            "predicted_ms": 1000 * self.seconds,
            "predicted_per_second": self.tokens_per_second,
            "draft_n": self.n_drafted,
            "draft_n_accepted": self.n_accepted,
        }

    def summary(self) -> str:
        """The one-line stats a user reads after a generation."""
        return (
            f"{self.n_tokens} tokens, {self.tokens_per_second:.1f} tok/s, "
            f"drafted {self.n_drafted}, accepted {self.n_accepted} "
            f"({100 * self.acceptance_rate:.1f}%), "
            f"{self.tokens_per_pass:.2f} tokens/target pass"
        )
