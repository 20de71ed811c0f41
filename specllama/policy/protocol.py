"""What the engine tells a draft-length policy, and what it asks of it.

The engine calls a :class:`DraftPolicy` and nothing else of it (the parallel
slots excepted: their :class:`~.batch.BatchPolicy` reads a
:class:`~.adaptive.MeasuredPolicy`'s costs and acceptance): a choice
before each pass (:meth:`DraftPolicy.choose`), a record after it
(:meth:`DraftPolicy.observe`), the warm-up's timings at load, the draft's
catch-up after target-only passes, and a new sequence's start. The choice
must be a function of past passes (and of the policy's own random generator)
only: k is fixed before the pass draws anything, so it cannot bias the
tokens (docs/how-it-works.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

DEFAULT_DRAFT_MAX = 8  # the cap of the draft length (--draft-max)
# passes the records remember (acceptance; slots' step costs) and knowledge is valued over: longer is finer, slower
MEMORY = 100


class Plan(NamedTuple):
    """The next pass: ``k`` drafts; with k = 0, ``pad`` > 0 asks for a
    target-only pass of 1 + pad rows and a draft step, timed (a probe of
    costs that target-only decoding does not time)."""

    k: int
    pad: int = 0


@dataclass(frozen=True)
class PassRecord:
    """One pass as the engine timed it.

    Attributes:
        n_drafted, n_accepted: its draft length and how many drafts were kept.
        draft_seconds: its draft steps (a catch-up after target-only passes excluded).
        first_step: of ``draft_seconds``, the first step's (None: not timed apart).
        verify_seconds: its target pass and the acceptance walk.
        rows: the target pass's rows (n_drafted + 1; 1 + pad for a probe).
        run: target passes of this shape in a row, itself included, where
            that changes the cost (a GPU's CUDA graphs); None elsewhere.
        probe_step: a probe's draft step, timed (None: none).
        lookup: the drafts came from prompt lookup: no draft steps, and their
            acceptance is lookup's own, not the draft model's.
    """

    n_drafted: int
    n_accepted: int
    draft_seconds: float
    verify_seconds: float
    rows: int
    first_step: float | None = None
    run: int | None = None
    probe_step: float | None = None
    lookup: bool = False


@dataclass(frozen=True)
class WarmUp:
    """Timings taken at load: draft steps, target passes by rows (settled:
    on a GPU the third of their shape in a row), on a GPU 1-row passes
    right after another shape, draft decodes of two tokens (what a
    token adds to a draft decode: the slots' batched draft steps), and the
    draft's prefill of a short prompt, per token (what a token of its
    catch-up costs after target-only passes)."""

    draft_steps: list[float] = field(default_factory=list)
    rows: dict[int, list[float]] = field(default_factory=dict)
    switch_one_row: list[float] = field(default_factory=list)
    draft_pairs: list[float] = field(default_factory=list)
    catch_up: list[float] = field(default_factory=list)


class DraftPolicy(Protocol):
    """How many tokens to draft in each pass (see the module doc)."""

    drafting_passes: int  # passes that drafted (the engine remembers the costs only after one)

    def choose(self, cap: int, *, minimum: int = 0, behind: int = 0, remaining: int | None = None) -> Plan:
        """The next pass's plan, k <= ``cap``, and for an adaptive policy ``minimum`` <= k (a cap below the
        minimum wins; a fixed draft length ignores the minimum, as ``--draft-min`` says); the draft model lacks
        ``behind`` tokens of the sequence (drafting first catches them up), and the generation may emit at most
        ``remaining`` more (None: no bound known)."""

    def observe(self, record: PassRecord) -> None:
        """Learn from one finished pass."""

    def observe_catch_up(self, seconds: float, n_tokens: int) -> None:
        """The draft model evaluated ``n_tokens`` it had skipped, before a pass drafted."""

    def observe_warm_up(self, warm: WarmUp) -> None:
        """Timings taken at load."""

    def observe_agreement(self, agreed: int, n: int) -> None:
        """The warm-up's check: ``agreed`` of ``n`` greedy draft tokens were the target's greedy choice too."""

    def new_sequence(self) -> None:
        """A generation starts (its prompt's passes came between)."""

    def drafting(self, cap: int) -> bool:
        """Whether the next passes are likely to draft (the draft is fed the prompt only then)."""

    def verdict(self, cap: int) -> str | None:
        """Why drafting cannot pay here, in words, where the costs say so; None otherwise."""

    def costs_in_words(self, cap: int) -> str:
        """Whether drafting can pay here at all, in words, with the costs it rests on."""

    def rate(self, k: int) -> float:
        """Expected tokens per second of the next pass with k drafts (0 before costs are timed)."""

    def verify_cost(self, rows: int) -> float:
        """Seconds of a target pass of ``rows`` rows now (0 before any is timed)."""

    def describe(self, cap: int) -> dict:
        """What the choices stand on, for ``--json``'s report."""

    def snapshot(self) -> dict:
        """What a later process may start from."""

    def seed(self, saved: dict) -> None:
        """Start from a :meth:`snapshot` of an earlier process."""
