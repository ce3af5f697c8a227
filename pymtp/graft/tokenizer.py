"""The base model's tokenizer and chat template, through the native library (vocab only:
no weights are loaded), so the training data is tokenized exactly as pymtp will tokenize it."""

from __future__ import annotations

from pathlib import Path

from pymtp.errors import ModelLoadError


class Tokenizer:
    def __init__(self, path):
        from pymtp._native import llama as L
        from pymtp.gguf_meta import read_info

        self.path = Path(path)
        self.lib = L.lib()
        mp = self.lib.llama_model_default_params()
        mp.vocab_only = True
        self.model = self.lib.llama_model_load_from_file(str(self.path).encode(), mp)
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load the vocabulary of {path}: {L.last_log_lines()}")
        self.vocab = self.lib.llama_model_get_vocab(self.model)
        self.n_vocab = self.lib.llama_vocab_n_tokens(self.vocab)
        info = read_info(self.path)
        self.chat_template = info.chat_template
        self.bos_text = info.bos_token or ""
        self.eos_text = info.eos_token or ""
        self.bos_id = int(self.lib.llama_vocab_bos(self.vocab))
        self.add_bos = bool(self.lib.llama_vocab_get_add_bos(self.vocab))
        self.eog_ids = [t for t in range(self.n_vocab) if self.lib.llama_vocab_is_eog(self.vocab, t)]
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

        text = render_chat(self.chat_template, messages, add_generation_prompt=True,
                           bos_token=self.bos_text, eos_token=self.eos_text)
        bos = self.bos_text
        return self.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)

    def close(self) -> None:
        if getattr(self, "model", None):
            self.lib.llama_model_free(self.model)
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


def pretokenize(tok: Tokenizer, samples: int, seed: int, corpus=()) -> None:
    """Tokenize now (memoized in ``tok``) every prompt a data set of ``samples`` generated
    sequences uses and every corpus file, exactly as pymtp.graft.data will ask for them, so that
    no libllama tokenization happens once numpy/PyTorch are loaded (pymtp.cli.graft says why)."""
    from .prompts import unique_prompts

    if samples > 0:
        for p in unique_prompts(samples, seed=seed):
            tok.chat_tokens(p) if isinstance(p, list) else tok.tokenize(p)
    for f in corpus:
        try:
            text = Path(f).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue                     # corpus_dataset reports it
        tok.tokenize(text, add_special=False, parse_special=False)
