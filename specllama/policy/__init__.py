"""The draft-length policy: how many tokens to draft in each pass.

- :mod:`.protocol`: what the engine tells a policy and asks of it (:class:`DraftPolicy`).
- :mod:`.costs`: one model of this machine's timings (a shared level, an offset per kind).
- :mod:`.acceptance`: the chance each draft position is kept.
- :mod:`.adaptive`: the choice (:class:`AdaptivePolicy`), and :class:`FixedPolicy` (``--draft-fixed``).
- :mod:`.batch`: the choice of parallel slots running together (:class:`BatchPolicy`).
"""

from .acceptance import expected_tokens
from .adaptive import AdaptivePolicy, FixedPolicy, MeasuredPolicy, warm_up_rows
from .batch import Batch, BatchPolicy
from .costs import SETTLED
from .protocol import DEFAULT_DRAFT_MAX, DraftPolicy, PassRecord, Plan, WarmUp

WARM_UP_TIMINGS = 5  # timings of each kind the warm-up at load takes, all learnt from: more start surer, load slower

__all__ = ["AdaptivePolicy", "Batch", "BatchPolicy", "DEFAULT_DRAFT_MAX", "DraftPolicy", "FixedPolicy",
           "MeasuredPolicy", "PassRecord", "Plan", "SETTLED", "WARM_UP_TIMINGS", "WarmUp", "expected_tokens",
           "warm_up_rows"]
