"""One loaded model and its KV cache, through llama-cpp-python.

It tokenizes, decodes a batch asking llama.cpp for logits only on the rows
the caller needs (never an n_ctx x n_vocab buffer), and rewinds the KV
cache. It keeps the list of tokens the cache holds, so callers can reuse a
shared prefix instead of evaluating it again.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from typing import Sequence

import llama_cpp
import numpy as np

from ..errors import ContextFull, SpecLlamaError
from ..prefix import common_prefix_len
from ..vocab import VocabInfo
from . import cpu, rpc
from .files import check_gguf_file
from .log import quiet_stderr

DEFAULT_N_CTX = 4096
DEFAULT_N_BATCH = 512
DEFAULT_N_GPU_LAYERS = 0
MAX_N_CTX = 2**32 - 256  # llama.cpp keeps n_ctx in 32 bits and rounds it up to a multiple of 256


def is_llama(obj: object) -> bool:
    """True for a ``llama_cpp.Llama`` (so no other module imports llama_cpp)."""
    return isinstance(obj, llama_cpp.Llama)


def system_info() -> str:
    """llama.cpp's build line: its backends and CPU features (for bug reports)."""
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()


def build_info() -> str:
    """What identifies this llama.cpp build: llama-cpp-python's version and
    llama.cpp's system info (backends, CPU features)."""
    return f"llama-cpp-python {llama_cpp.__version__}; {system_info()}"


def supports_gpu_offload() -> bool:
    """Whether this llama-cpp-python build can offload layers to a GPU."""
    return bool(llama_cpp.llama_supports_gpu_offload())


def default_threads() -> int:
    """All cores (llama-cpp-python's own default is half of them)."""
    return os.cpu_count() or 1


@contextlib.contextmanager
def _context_params(**fields):
    """``llama_cpp.Llama`` creates its context from llama.cpp's default
    parameters and takes no ``n_seq_max``/``kv_unified``: while a model loads
    here, the defaults it reads carry ``fields``."""
    module = llama_cpp.llama_cpp
    default = module.llama_context_default_params

    def with_fields():
        params = default()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    module.llama_context_default_params = with_fields
    try:
        yield
    finally:
        module.llama_context_default_params = default


def _quantized(llama: "llama_cpp.Llama") -> bool:
    """Whether the model's weights are mostly quantized (its ``general.file_type``: not F32, F16 or BF16)."""
    buf = ctypes.create_string_buffer(16)
    n = llama_cpp.llama_model_meta_val_str(llama.model, b"general.file_type", buf, len(buf))
    return n <= 0 or int(buf.value or b"-1") not in (llama_cpp.LLAMA_FTYPE_ALL_F32, llama_cpp.LLAMA_FTYPE_MOSTLY_F16,
                                                       llama_cpp.LLAMA_FTYPE_MOSTLY_BF16)


class LlamaModel:
    """One loaded model with one KV cache (sequence 0).

    Args:
        path: a GGUF file.
        n_ctx: context length in tokens (the KV cache size).
        n_gpu_layers: layers to offload to the GPU (-1 or a large number: all).
        n_threads: CPU threads (None: llama-cpp-python's default).
        n_batch: the most tokens one llama.cpp decode call takes.
        verbose: let llama.cpp print its load log to stderr.
        rpc_servers: llama.cpp RPC servers (``host:port``) whose devices take
            offloaded layers, before the local GPUs; once any server is
            registered in this process, a model without servers of its own
            stays on local devices.
        tensor_split: each device's share of the offloaded layers, in device
            order (RPC servers first).
        flash_attn: flash attention (llama.cpp's ``-fa on``). Off by default:
            on the CPU it makes a row's logits depend more on the batch it was
            computed in (see benchmarks/numerics.py), so temperature-0 output
            of (k+1)-row passes parts sooner from one-row decoding.
        n_seq_max: sequences the KV cache holds at once (parallel slots), sharing
            its ``n_ctx`` cells as llama-server's unified cache does: each may
            grow to ``n_ctx`` while the others leave room. :meth:`sequence`
            gives each its own view; :meth:`decode_batch` decodes several in
            one ``llama_decode``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_gpu_layers: int = DEFAULT_N_GPU_LAYERS,
        n_threads: int | None = None,
        n_batch: int = DEFAULT_N_BATCH,
        verbose: bool = False,
        rpc_servers: Sequence[str] = (),
        tensor_split: Sequence[float] | None = None,
        flash_attn: bool = False,
        n_seq_max: int = 1,
    ) -> None:
        self.path = check_gguf_file(path)
        self.rpc_servers: tuple[str, ...] = tuple(rpc_servers)
        self._holds_rpc = False
        if n_ctx < 1:
            raise SpecLlamaError(f"context size must be >= 1 token, got {n_ctx}")
        if n_ctx > MAX_N_CTX:
            raise SpecLlamaError(f"context size {n_ctx} is beyond what llama.cpp can hold: use -c/--ctx-size "
                                 f"{MAX_N_CTX} or less")
        if not 1 <= n_seq_max <= llama_cpp.llama_max_parallel_sequences():
            raise SpecLlamaError(f"parallel sequences must be 1..{llama_cpp.llama_max_parallel_sequences()}, "
                                 f"got {n_seq_max}")
        if n_threads is not None and n_threads < 1:
            raise SpecLlamaError(f"threads must be >= 1, got {n_threads}")
        if n_threads is None:
            n_threads = default_threads()
        self._requested_n_ctx = n_ctx
        rpc.add_servers(self.rpc_servers)
        offload = rpc.offload_devices(self.rpc_servers)
        #: the devices offloaded layers may go to, by name (None: llama.cpp's default choice)
        self.devices: list[str] | None = offload[1] if offload else None
        if tensor_split is not None:
            n_devices = len(offload[0]) if offload else len(rpc.local_offload_devices())
            if len(tensor_split) > n_devices:
                on = f": {', '.join(self.devices)}" if self.devices else " (no GPU, no RPC server)"
                shares = f"{len(tensor_split)} share{'' if len(tensor_split) == 1 else 's'}"
                raise SpecLlamaError(f"tensor split gives {shares}, but {self.path!r} has "
                                     f"{n_devices} device{'' if n_devices == 1 else 's'} to split over{on}")
        def load() -> "llama_cpp.Llama":
            slots = _context_params(n_seq_max=n_seq_max, kv_unified=True) if n_seq_max > 1 else contextlib.nullcontext()
            with quiet_stderr(not verbose), rpc.model_devices(offload[0] if offload else None) as devices_array, slots:
                self._devices_array = devices_array  # the loaded model's params point into it
                return llama_cpp.Llama(
                    model_path=self.path,
                    n_ctx=n_ctx,
                    n_batch=min(n_batch, n_ctx),
                    n_ubatch=min(n_batch, n_ctx),
                    n_gpu_layers=n_gpu_layers,
                    n_threads=n_threads,
                    n_threads_batch=n_threads,
                    logits_all=False,
                    # A full-size sliding-window cache, so rewinding after a
                    # rejection never needs a cell the window already dropped.
                    swa_full=True,
                    flash_attn=flash_attn,
                    tensor_split=list(tensor_split) if tensor_split is not None else None,
                    verbose=verbose,
                )

        try:
            self.llama = load()
            if cpu.amx_refused(self.path, _quantized(self.llama)) and rpc.load_without_extra_buffers():
                self.llama.close()  # loaded with AMX buffers, which this machine refuses: again without
                self.llama = load()
        except (ValueError, RuntimeError, MemoryError) as e:
            hint = ""
            if "context" in str(e).lower() or isinstance(e, MemoryError):
                hint = (f" (the KV cache for a context of {n_ctx} tokens may not fit in memory: "
                        "try a smaller -c/--ctx-size)")
            reason = str(e) or type(e).__name__
            raise SpecLlamaError(f"llama.cpp could not load {self.path!r}: {reason}{hint}") from None
        rpc.hold(self.rpc_servers)
        self._holds_rpc = True
        self._attach(owns_llama=True)

    @classmethod
    def from_llama(cls, llama: "llama_cpp.Llama") -> "LlamaModel":
        """Drive an application's existing ``llama_cpp.Llama`` (its context and
        KV cache; closing this object leaves the Llama open).

        The Llama's own prompt cache is reset, so calling it directly later
        evaluates its prompt afresh.
        """
        if not is_llama(llama):
            raise TypeError(f"expected a llama_cpp.Llama, got {llama!r}")
        self = cls.__new__(cls)
        self.path = llama.model_path
        self.rpc_servers, self._holds_rpc, self.devices = (), False, None
        self.llama = llama
        n_swa = int(llama_cpp.llama_model_n_swa(llama.model))
        if n_swa > 0 and not llama.context_params.swa_full:
            raise SpecLlamaError(
                f"{self.path!r} uses a sliding attention window: create its Llama with swa_full=True, "
                "so the cache can be rewound after a rejected draft"
            )
        self._attach(owns_llama=False)
        llama.n_tokens = 0
        return self

    def _attach(self, *, owns_llama: bool) -> None:
        self._owns_llama = owns_llama
        self._base, self._freed = self, False
        self._ctx_p = self.llama.ctx
        self._vocab_p = llama_cpp.llama_model_get_vocab(self.llama.model)
        self._memory_p = llama_cpp.llama_get_memory(self._ctx_p)
        requested = getattr(self, "_requested_n_ctx", None)
        actual = int(llama_cpp.llama_n_ctx(self._ctx))
        # llama.cpp may round the cache up; the context is what was asked for.
        self.n_ctx = min(requested, actual) if requested else actual
        self.n_batch = int(llama_cpp.llama_n_batch(self._ctx))
        #: flash attention, as asked for (llama.cpp may still run it off on a device without it)
        self.flash_attn = self.llama.context_params.flash_attn_type != llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._pieces: dict[int, bytes] = {}
        #: the tokens the KV cache holds, position by position (this view's sequence)
        self.tokens: list[int] = []
        #: the sequence this object decodes (0; :meth:`sequence` gives views of the others)
        self.seq_id = 0
        self.n_seq_max = int(llama_cpp.llama_n_seq_max(self._ctx))
        self._cells = actual  # the cells every sequence shares
        self._base = self
        self._views: dict[int, LlamaModel] = {0: self}
        #: where a view's :meth:`eval` goes instead of decoding alone (a scheduler that batches sequences)
        self.submit = None
        #: tokens of other sequences in the last ``llama_decode`` this one took part in
        self.others_in_batch = 0
        #: seconds spent inside llama.cpp decoding (and copying logits), ever
        self.decode_seconds = 0.0
        #: whether some of the model's layers run on a GPU, here or an RPC server's (a build that could
        #: offload, with no GPU and no server, runs every layer on the CPU)
        n_gpu_layers = int(getattr(getattr(self.llama, "model_params", None), "n_gpu_layers", 0))
        self.offloaded = n_gpu_layers != 0 and bool(getattr(self, "rpc_servers", ()) or rpc.local_offload_devices())
        #: how many llama_decode calls in a row, the latest included, had its shape (tokens, logits rows):
        #: on a GPU llama.cpp replays a CUDA graph only from the third call of one shape in a row (it runs
        #: the first directly and captures the second), so a pass's cost depends on it there
        self.same_shape_run = 0
        self._last_shape: tuple[int, int] | None = None
        llama_cpp.llama_memory_clear(self._memory, True)

    # -- llama.cpp's pointers: none once closed (a call then is an error, not a crash) --

    def _open(self, pointer):
        if self._base._freed:
            raise SpecLlamaError(f"the model {self.path!r} is closed")
        return pointer

    @property
    def _ctx(self):
        return self._open(self._ctx_p)

    @property
    def _vocab(self):
        return self._open(self._vocab_p)

    @property
    def _memory(self):
        return self._open(self._memory_p)

    # -- vocabulary -------------------------------------------------------

    @property
    def bos(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self._vocab))

    @property
    def eos(self) -> int:
        return int(llama_cpp.llama_vocab_eos(self._vocab))

    @property
    def metadata(self) -> dict[str, str]:
        """The GGUF file's key/value metadata (``tokenizer.chat_template``,
        ``general.architecture``, ...)."""
        return dict(self.llama.metadata)

    @property
    def bos_text(self) -> str:
        """The BOS token spelled out (``<bos>``), for chat templates."""
        return self.detokenize_special(self.bos) if self.bos >= 0 else ""

    @property
    def eos_text(self) -> str:
        """The EOS token spelled out (``<eos>``), for chat templates."""
        return self.detokenize_special(self.eos) if self.eos >= 0 else ""

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, ...)."""
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def eog_tokens(self) -> list[int]:
        """Every end-of-generation token of the vocabulary (EOS, EOT, ...)."""
        if getattr(self, "_eog", None) is None:
            self._eog = [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, t)]
        return list(self._eog)

    def grammar_tokenizer(self):
        """llguidance's tokenizer for this vocabulary, whose end-of-generation
        tokens are the model's whole EOG set (built once per model: about a
        second for a large vocabulary)."""
        if getattr(self, "_grammar_tokenizer", None) is None:
            import warnings

            from llguidance.llamacpp import lltokenizer_from_vocab

            with warnings.catch_warnings():  # it reads token attributes through a name llama-cpp-python deprecated
                warnings.simplefilter("ignore", DeprecationWarning)
                self._grammar_tokenizer = lltokenizer_from_vocab(self._vocab, n_vocab=self.n_vocab,
                                                                 eos_token=self.eog_tokens())
        return self._grammar_tokenizer

    def vocab_info(self) -> VocabInfo:
        get_text = llama_cpp.llama_vocab_get_text
        tokens = [get_text(self._vocab, i) or b"" for i in range(self.n_vocab)]
        return VocabInfo(
            path=self.path,
            vocab_type=int(llama_cpp.llama_vocab_type(self._vocab)),
            bos=self.bos,
            eos=self.eos,
            tokens=tokens,
        )

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Text to token ids; BOS is added when ``add_bos`` and the model wants one."""
        return list(self.llama.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special))

    def fim_tokens(self):
        """The vocabulary's fill-in-the-middle tokens
        (:class:`~specllama.infill.FimTokens`; None without prefix, suffix and
        middle tokens)."""
        from ..infill import FimTokens

        v = self._vocab

        def token(get) -> int | None:
            t = int(get(v))
            return t if t >= 0 else None

        pre, suf, mid = (token(llama_cpp.llama_vocab_fim_pre), token(llama_cpp.llama_vocab_fim_suf),
                         token(llama_cpp.llama_vocab_fim_mid))
        if pre is None or suf is None or mid is None:
            return None
        return FimTokens(pre, suf, mid, token(llama_cpp.llama_vocab_fim_rep), token(llama_cpp.llama_vocab_fim_sep),
                         self.bos if llama_cpp.llama_vocab_get_add_bos(v) and self.bos >= 0 else None)

    def infill_vocab(self):
        """The vocabulary as llama.cpp's "infill" sampler reads it
        (:class:`~specllama.sampling.InfillVocab`; built once)."""
        if getattr(self, "_infill_vocab", None) is None:
            from ..sampling import InfillVocab

            eot = int(llama_cpp.llama_vocab_eot(self._vocab))
            self._infill_vocab = InfillVocab([self.token_bytes(t) for t in range(self.n_vocab)],
                                             frozenset(self.eog_tokens()), eot if eot >= 0 else self.eos)
        return self._infill_vocab

    def special_token(self, text: str) -> int | None:
        """The one token that spells ``text`` in the output and that grammars
        see as a special token (llguidance: a user-defined token written
        ``<...>``; control tokens are special too, but print as nothing), or None."""
        tokens = self.tokenize(text, add_bos=False, special=True)
        if len(tokens) != 1 or self.token_bytes(tokens[0]) != text.encode():
            return None
        attr = llama_cpp.llama_vocab_get_attr(self._vocab, tokens[0])
        user = attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED and text.startswith("<") and text.endswith(">")
        return tokens[0] if user else None

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token stands for (control tokens render as b"")."""
        piece = self._pieces.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(64)  # one per call: safe from any thread
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            piece = buf.raw[:n]
            self._pieces[token] = piece
        return piece

    def detokenize_special(self, token: int) -> str:
        """A token's text with control tokens spelled out (``<bos>``, ...)."""
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    # -- the KV cache -----------------------------------------------------

    def eval(self, tokens: Sequence[int], *, n_logits: int = 1, copy: bool = True) -> np.ndarray:
        """Append ``tokens`` to the cache; return logits for the last ``n_logits``.

        Args:
            tokens: the tokens to evaluate, after those already cached.
            n_logits: how many of the last rows to return logits for.
            copy: False returns a view of llama.cpp's buffer instead of a
                copy: no copying, but valid only until the next ``eval``.

        Returns:
            float32 array of shape (n_logits, n_vocab); row j is the
            distribution after tokens[: len(tokens) - n_logits + j + 1].
        """
        self._open(None)
        n = len(tokens)
        if n and not (0 <= min(tokens) and max(tokens) < self.n_vocab):
            bad = next(t for t in tokens if not 0 <= t < self.n_vocab)
            raise SpecLlamaError(f"token id {bad} is out of range 0..{self.n_vocab - 1} "
                                 f"(the vocabulary of {self.path!r})")
        if not 0 <= n_logits <= n:
            raise ValueError(f"n_logits must be in [0, {n}], got {n_logits}")
        if len(self.tokens) + n > self.n_ctx:
            raise ContextFull(f"{len(self.tokens) + n} tokens do not fit the context of {self.n_ctx} (-c/--ctx-size)")
        if self.submit is not None:
            return self.submit(self, list(tokens), n_logits, copy)
        self._check_cells(n)
        first_logit = n - n_logits
        last_chunk = n - (n - 1) // self.n_batch * self.n_batch if n else 0
        if n_logits > last_chunk:
            raise ValueError(f"n_logits={n_logits} spans more than one batch of {self.n_batch}")
        batch = self._batch
        for start in range(0, n, self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            n_past = len(self.tokens)
            for j, tok in enumerate(chunk):
                batch.token[j] = tok
                batch.pos[j] = n_past + j
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = self.seq_id
                batch.logits[j] = 1 if start + j >= first_logit else 0
            batch.n_tokens = len(chunk)
            shape = (len(chunk), max(0, start + len(chunk) - max(first_logit, start)))
            self._note_shape(shape)
            self.others_in_batch = 0
            t0 = time.perf_counter()
            try:
                rc = llama_cpp.llama_decode(self._ctx, batch)
                if rc != 0:
                    raise RuntimeError(f"llama_decode failed with code {rc} on {self.path!r}")
                self.tokens.extend(int(t) for t in chunk)
            except BaseException:
                # A failed or interrupted (Ctrl-C) decode may leave cells the
                # token list does not know of: drop them, so both agree.
                self._remove_from(len(self.tokens))
                raise
            finally:
                self.decode_seconds += time.perf_counter() - t0
        if n_logits == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        # The output rows of the last chunk are contiguous, in batch order.
        t0 = time.perf_counter()
        ptr = llama_cpp.llama_get_logits(self._ctx)
        rows = np.ctypeslib.as_array(ptr, shape=(n_logits, self.n_vocab))
        if copy:
            rows = rows.copy()
        self.decode_seconds += time.perf_counter() - t0
        return rows

    def warm_up(self, rows: Sequence[int] = (1,)) -> dict[int, float]:
        """Decode each row count in ``rows`` once cold (llama.cpp allocates
        buffers on the first pass of a size, as its own tools' warm-up
        does), then once timed; leave the cache empty.

        Returns:
            rows -> seconds of one pass with that many logits rows.
        """
        token = self.bos if self.bos >= 0 else 0
        self.rewind(0)
        times: dict[int, float] = {}
        try:
            for n in sorted(set(rows)):
                if n > min(self.n_batch, self.n_ctx):
                    continue
                self.rewind(0)
                self.eval([token] * n, n_logits=n, copy=False)  # cold
                self.rewind(0)
                t0 = time.perf_counter()
                self.eval([token] * n, n_logits=n, copy=False)
                times[n] = time.perf_counter() - t0
        finally:
            self.rewind(0)
        return times

    def clear(self) -> None:
        """Empty the cache (of this sequence, where there are several), and
        tell the ``Llama`` object so (its own calls then start afresh)."""
        if self.n_seq_max > 1:
            llama_cpp.llama_memory_seq_rm(self._memory, self.seq_id, -1, -1)
        else:
            llama_cpp.llama_memory_clear(self._memory, True)
        del self.tokens[:]
        self.llama.n_tokens = 0

    def rewind(self, n_keep: int) -> None:
        """Drop every cached token from position ``n_keep`` on."""
        if n_keep < len(self.tokens):
            self._remove_from(n_keep)
            del self.tokens[n_keep:]

    def reuse(self, seq: Sequence[int], min_chunk: int) -> int:
        """llama-server's ``--cache-reuse``: after the prefix the cache shares
        with ``seq``, every run of at least ``min_chunk`` tokens that the cache
        holds further on, in ``seq``'s order, is shifted into its place in
        ``seq`` (its keys re-rotated by llama.cpp) instead of evaluated again;
        the rest of the cache is dropped.

        Returns:
            how many tokens at the start of ``seq`` the cache now holds.
        """
        cache, n = self.tokens, len(self.tokens)
        head_c = head_p = n_past = common_prefix_len(cache, seq)
        if min_chunk <= 0 or not llama_cpp.llama_memory_can_shift(self._memory):
            self.rewind(n_past)
            return n_past
        while head_c < n and head_p < len(seq):
            n_match = 0
            while head_c + n_match < n and head_p + n_match < len(seq) and cache[head_c + n_match] == seq[
                    head_p + n_match]:
                n_match += 1
            if n_match >= min_chunk:
                shift = head_p - head_c
                llama_cpp.llama_memory_seq_rm(self._memory, self.seq_id, head_p, head_c)
                llama_cpp.llama_memory_seq_add(self._memory, self.seq_id, head_c, head_c + n_match, shift)
                cache[head_p:head_p + n_match] = cache[head_c:head_c + n_match]
                head_p += n_match
                head_c += n_match
                n_past = head_p
            else:
                head_c += 1
        llama_cpp.llama_memory_seq_rm(self._memory, self.seq_id, n_past, -1)
        del cache[n_past:]
        return n_past

    def _remove_from(self, pos: int) -> None:
        if self._base._freed:  # (a generation's clean-up after the model was closed: nothing is cached)
            del self.tokens[:]
            return
        if not llama_cpp.llama_memory_seq_rm(self._memory, self.seq_id, pos, -1):
            # Some caches (recurrent models) cannot drop a tail: start over.
            llama_cpp.llama_memory_seq_rm(self._memory, self.seq_id, -1, -1)
            del self.tokens[:]

    # -- parallel sequences --------------------------------------------------

    def sequence(self, seq_id: int) -> "LlamaModel":
        """A view of sequence ``seq_id`` of this model's cache: the same model,
        its own token list (sequence 0's is this object's own); closing it
        leaves the model open."""
        base = self._base
        if not 0 <= seq_id < base.n_seq_max:
            raise ValueError(f"sequence {seq_id} is outside 0..{base.n_seq_max - 1}")
        view = object.__new__(type(self))
        view.__dict__.update(base.__dict__)
        view.seq_id, view.tokens = seq_id, base.tokens if seq_id == 0 else []
        view._owns_llama = view._holds_rpc = False
        view.decode_seconds, view.submit, view.others_in_batch = 0.0, None, 0
        base._views[seq_id] = view
        return view

    def free_cells(self) -> int:
        """Cells of the shared cache that no sequence holds."""
        base = self._base
        return base._cells - sum(len(v.tokens) for v in base._views.values())

    def _check_cells(self, n: int) -> None:
        if self.n_seq_max > 1 and n > self.free_cells():
            raise ContextFull(f"{n} more tokens do not fit the {self._base._cells} cells that the "
                              f"{self.n_seq_max} parallel sequences share (-c/--ctx-size)")

    def _note_shape(self, shape: tuple[int, int]) -> None:
        base = self._base
        base.same_shape_run = base.same_shape_run + 1 if shape == base._last_shape else 1
        base._last_shape = shape
        self.same_shape_run = base.same_shape_run

    def decode_batch(self, pieces: Sequence[tuple["LlamaModel", Sequence[int], int]]) -> list:
        """One ``llama_decode`` for several sequences: each piece is (a view,
        tokens it appends, how many of its last rows get logits); at most
        ``n_batch`` tokens in all.

        Returns:
            per piece, its logits rows (a view of llama.cpp's buffer, valid
            until the next decode) or the :class:`ContextFull` it raised
            (it then appended nothing).
        """
        self._open(None)
        base = self._base
        out: list = [None] * len(pieces)
        free = self.free_cells()
        taken = []
        for i, (view, tokens, n_logits) in enumerate(pieces):
            if len(view.tokens) + len(tokens) > view.n_ctx or len(tokens) > free:
                out[i] = ContextFull(f"{len(tokens)} more tokens do not fit: sequence {view.seq_id} holds "
                                     f"{len(view.tokens)} of a context of {view.n_ctx}, and {free} cells of the "
                                     f"shared cache are free (-c/--ctx-size)")
                continue
            free -= len(tokens)
            taken.append(i)
        n_total = sum(len(pieces[i][1]) for i in taken)
        if n_total > base.n_batch:
            raise ValueError(f"{n_total} tokens are more than one batch of {base.n_batch}")
        if not taken:
            return out
        batch, j, n_rows = base._batch, 0, 0
        for i in taken:
            view, tokens, n_logits = pieces[i]
            n_past, first_logit = len(view.tokens), len(tokens) - n_logits
            for t, tok in enumerate(tokens):
                batch.token[j] = tok
                batch.pos[j] = n_past + t
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = view.seq_id
                batch.logits[j] = 1 if t >= first_logit else 0
                j += 1
            n_rows += n_logits
        batch.n_tokens = n_total
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(base._ctx, batch)
        if rc != 0:
            for i in taken:
                pieces[i][0]._remove_from(len(pieces[i][0].tokens))
            raise RuntimeError(f"llama_decode failed with code {rc} on {base.path!r} ({len(taken)} sequences)")
        rows = np.ctypeslib.as_array(llama_cpp.llama_get_logits(base._ctx), shape=(max(n_rows, 1), base.n_vocab))
        seconds = time.perf_counter() - t0
        row = 0
        for i in taken:
            view, tokens, n_logits = pieces[i]
            view.tokens.extend(int(t) for t in tokens)
            view.decode_seconds += seconds
            view.others_in_batch = n_total - len(tokens)
            view._note_shape((n_total, n_rows))
            out[i] = rows[row:row + n_logits]
            row += n_logits
        return out

    def close(self) -> None:
        if self._base is not self:
            self._base._views.pop(self.seq_id, None)
            if self.seq_id == 0:
                self._base._views[0] = self._base
            return
        self._freed = True
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._owns_llama:
            with contextlib.suppress(Exception):
                self.llama.close()
        if self._holds_rpc:
            self._holds_rpc = False
            rpc.release(self.rpc_servers)

    def __enter__(self) -> "LlamaModel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
