"""Tokenizer calls on a llama_vocab: the two-pass buffer dance written once, and its special tokens."""

from __future__ import annotations

import ctypes as C

from . import llama as L


def tokenize(vocab, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
    lib = L.lib()
    raw = text.encode("utf-8")
    cap = len(raw) + 16
    buf = (L.llama_token * cap)()
    n = lib.llama_tokenize(vocab, raw, len(raw), buf, cap, add_special, parse_special)
    if n < 0:  # buffer too small: -n is what it needs
        cap = -n
        buf = (L.llama_token * cap)()
        n = lib.llama_tokenize(vocab, raw, len(raw), buf, cap, add_special, parse_special)
    return list(buf[:n])


def token_piece(vocab, token: int, special: bool = False) -> bytes:
    lib = L.lib()
    buf = C.create_string_buffer(64)
    n = lib.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    if n < 0:
        buf = C.create_string_buffer(-n)
        n = lib.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    return buf.raw[:n]


def n_tokens(vocab) -> int:
    return int(L.lib().llama_vocab_n_tokens(vocab))


def bos(vocab) -> int:
    """The BOS token id (-1: the vocabulary has none)."""
    return int(L.lib().llama_vocab_bos(vocab))


def eos(vocab) -> int:
    """The EOS token id (-1: the vocabulary has none)."""
    return int(L.lib().llama_vocab_eos(vocab))


def adds_bos(vocab) -> bool:
    """Whether tokenizing with add_special puts BOS first."""
    return bool(L.lib().llama_vocab_get_add_bos(vocab))


def is_eog(vocab, token: int) -> bool:
    """Whether ``token`` ends a generation (EOS, EOT, ...)."""
    return bool(L.lib().llama_vocab_is_eog(vocab, token))


def eog_ids(vocab) -> list[int]:
    """Every end-of-generation token id of the vocabulary."""
    lib = L.lib()
    return [t for t in range(lib.llama_vocab_n_tokens(vocab)) if lib.llama_vocab_is_eog(vocab, t)]
