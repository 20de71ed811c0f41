"""Tiny llama-architecture GGUF models, written by the test suite itself.

Random F32 weights and a working SentencePiece-style vocabulary (byte
fallback included, so any text tokenizes and a character outside the
vocabulary spans several tokens). A draft is the target with noise added to
its weights, so acceptance lies strictly between 0 and 1.
"""

from __future__ import annotations

import string
from pathlib import Path

import gguf
import numpy as np

N_EMBD = 64
N_HEAD = 4
N_LAYER = 2
N_FF = 128
N_CTX_TRAIN = 1024

WORDS = (
    "the a an and of to in is was it he she they we you that this with for on at by from as "
    "once upon time there lived king queen cat dog house tree little big old new day night "
    "said went came saw ran looked happy sad good bad very one two three"
).split()

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6


def vocabulary(extra: tuple[str, ...] = ()) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types of the tiny SentencePiece vocabulary."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TOKEN_BYTE] * 256
    pieces: list[str] = ["\u2581"] + list(string.ascii_lowercase + string.ascii_uppercase + string.digits + ".,!?'")
    for w in WORDS + list(extra):
        # every prefix of "▁word", so the bigram merges can build the word
        full = "\u2581" + w
        pieces += [full[:i] for i in range(2, len(full) + 1)]
    seen: set[str] = set(tokens)
    for p in pieces:
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(TOKEN_NORMAL)
    # longer pieces merge first
    scores = [0.0] * 259 + [float(len(t)) - 1e-3 * i for i, t in enumerate(tokens[259:])]
    return tokens, scores, types


def random_weights(n_vocab: int, seed: int, logit_scale: float = 3.0, n_layer: int = N_LAYER) -> dict[str, np.ndarray]:
    """Weights of a small llama; numpy shapes are (out, in), as gguf expects. A deeper model's first
    ``N_LAYER`` layers are those of the default one with the same seed."""
    rng = np.random.default_rng(seed)

    def mat(n_out: int, n_in: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)

    w = {
        "token_embd.weight": rng.standard_normal((n_vocab, N_EMBD)).astype(np.float32),
        "output_norm.weight": np.ones(N_EMBD, dtype=np.float32),
        "output.weight": mat(n_vocab, N_EMBD, logit_scale),
    }
    for i in range(n_layer):
        b = f"blk.{i}."
        w[b + "attn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        w[b + "attn_q.weight"] = mat(N_EMBD, N_EMBD)
        w[b + "attn_k.weight"] = mat(N_EMBD, N_EMBD)
        w[b + "attn_v.weight"] = mat(N_EMBD, N_EMBD)
        w[b + "attn_output.weight"] = mat(N_EMBD, N_EMBD)
        w[b + "ffn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        w[b + "ffn_gate.weight"] = mat(N_FF, N_EMBD)
        w[b + "ffn_up.weight"] = mat(N_FF, N_EMBD)
        w[b + "ffn_down.weight"] = mat(N_EMBD, N_FF)
    return w


def perturb(weights: dict[str, np.ndarray], noise: float, seed: int) -> dict[str, np.ndarray]:
    """The same weights with relative Gaussian noise: a draft that mostly agrees."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, w in weights.items():
        if name.endswith("norm.weight"):
            out[name] = w
        else:
            out[name] = (w + noise * w.std() * rng.standard_normal(w.shape)).astype(np.float32)
    return out


def write_model(
    path: Path,
    weights: dict[str, np.ndarray],
    tokens: list[str],
    scores: list[float],
    types: list[int],
    *,
    name: str = "tiny",
    eot: int | None = None,
    chat_template: str | None = None,
    split_max_tensors: int = 0,
) -> Path:
    """Write a model; ``split_max_tensors`` > 0 writes a split GGUF (``NAME-00001-of-0000N.gguf``, the first
    part's path returned)."""
    w = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    w.add_name(name)
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(sum(1 for t in weights if t.endswith(".attn_norm.weight")))
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if eot is not None:
        w.add_eot_token_id(eot)  # a second end-of-generation token
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for tname, arr in weights.items():
        w.add_tensor(tname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if split_max_tensors:
        parts = sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf"))
        return parts[0]
    return path


def write_deep_target(folder: Path, *, n_layer: int = 4 * N_LAYER, seed: int = 0, name: str = "tiny-deep") -> Path:
    """A target ``n_layer`` deep in write_pair's vocabulary whose first layers are write_pair's target's (same
    seed) and whose further layers add almost nothing (their outputs scaled down): write_pair's draft agrees
    with it about as with its own target, at a fraction of its cost per token."""
    tokens, scores, types = vocabulary()
    weights = random_weights(len(tokens), seed, n_layer=n_layer)
    for i in range(N_LAYER, n_layer):
        for part in ("attn_output", "ffn_down"):
            weights[f"blk.{i}.{part}.weight"] *= 1e-3
    return write_model(folder / f"{name}.gguf", weights, tokens, scores, types, name=name)


EOT_TEXT = "<|eot|>"


def write_pair(folder: Path, *, noise: float = 0.1, seed: int = 0, with_eot: bool = False,
               chat_template: str | None = None, prefix: str = "tiny") -> tuple[Path, Path]:
    """A target and a perturbed draft sharing one vocabulary; ``with_eot``
    appends a second end-of-generation token, ``EOT_TEXT`` (its id is the
    last one)."""
    tokens, scores, types = vocabulary()
    eot = None
    if with_eot:
        eot = len(tokens)
        tokens, scores, types = tokens + [EOT_TEXT], scores + [0.0], types + [TOKEN_CONTROL]
    target_w = random_weights(len(tokens), seed)
    target = write_model(folder / f"{prefix}-target.gguf", target_w, tokens, scores, types, name=f"{prefix}-target",
                         eot=eot, chat_template=chat_template)
    draft = write_model(folder / f"{prefix}-draft.gguf", perturb(target_w, noise, seed + 1), tokens, scores, types,
                        name=f"{prefix}-draft", eot=eot, chat_template=chat_template)
    return target, draft


def write_foreign_draft(folder: Path, *, seed: int = 0) -> tuple[Path, int]:
    """A draft whose vocabulary differs from write_pair's at one id.

    Returns:
        the path and the first id whose token text differs.
    """
    tokens, scores, types = vocabulary()
    i = tokens.index("\u2581king")
    tokens[i] = "\u2581kong"
    path = write_model(folder / "tiny-foreign.gguf", random_weights(len(tokens), seed), tokens, scores, types)
    return path, i
