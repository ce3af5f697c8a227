"""The base model's tokenizer and chat template, through the native library (vocab only:
no weights are loaded), so the training data is tokenized exactly as pymtp will tokenize it."""

from __future__ import annotations

from pathlib import Path

from pymtp.errors import ModelLoadError


class Tokenizer:
    def __init__(self, path):
        from pymtp._native import model_calls as mc
        from pymtp._native import vocab as vocab_calls
        from pymtp.gguf_meta import read_info

        self.path = Path(path)
        self._free_model = mc.free_model
        self.model = mc.load_model(self.path, vocab_only=True)
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load the vocabulary of {path}: {mc.last_log_lines()}")
        self.vocab = mc.model_vocab(self.model)
        self.n_vocab = vocab_calls.n_tokens(self.vocab)
        info = read_info(self.path)
        self.chat_template = info.chat_template
        self.bos_text = info.bos_token or ""
        self.eos_text = info.eos_token or ""
        self.bos_id = vocab_calls.bos(self.vocab)
        self.add_bos = vocab_calls.adds_bos(self.vocab)
        self.eog_ids = vocab_calls.eog_ids(self.vocab)
        self._memo = {}

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids (memoized: see pretokenize)."""
        key = (text, bool(add_special), bool(parse_special))
        ids = self._memo.get(key)
        if ids is None:
            from pymtp._native.vocab import tokenize

            ids = self._memo[key] = tokenize(self.vocab, text, add_special, parse_special)
        return list(ids)

    def piece(self, token: int) -> bytes:
        from pymtp._native.vocab import token_piece

        return token_piece(self.vocab, token)

    def detokenize(self, tokens) -> str:
        return b"".join(self.piece(int(t)) for t in tokens).decode("utf-8", "replace")

    def chat_tokens(self, messages: list[dict]) -> list[int]:
        """Like pymtp.Model.chat_tokens: the rendered conversation, BOS added unless the
        template wrote it."""
        from pymtp.chat_template import render_chat

        return self.rendered_tokens(render_chat(self.chat_template, messages, add_generation_prompt=True,
                                                bos_token=self.bos_text, eos_token=self.eos_text))

    def rendered_tokens(self, text: str) -> list[int]:
        """Tokens of text a chat template rendered: special tokens parsed, BOS added unless it is there."""
        bos = self.bos_text
        return self.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)

    def close(self) -> None:
        if getattr(self, "model", None):
            self._free_model(self.model)
            self.model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def pretokenize(tok: Tokenizer, samples: int, seed: int, corpus=(), self_prompts: bool = False) -> None:
    """Tokenize now (memoized in ``tok``) every prompt a data set of ``samples`` generated
    sequences uses and every corpus file, exactly as pymtp.graft.data will ask for them, so that
    no libllama tokenization happens once numpy/PyTorch are loaded (pymtp.cli.graft says why)."""
    from .prompts import unique_prompts

    if samples > 0:
        for p in unique_prompts(samples, seed=seed):
            tok.chat_tokens(p) if isinstance(p, list) else tok.tokenize(p)
    if samples > 0 and self_prompts:
        from .self_prompts import chat_frame

        chat_frame(tok)
    for f in corpus:
        try:
            text = Path(f).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue                     # corpus_dataset reports it
        tok.tokenize(text, add_special=False, parse_special=False)
