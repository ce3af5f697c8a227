"""Token sequences as graft stores them: ``Dataset``, one array of all tokens with each sequence's offset,
prompt length, split (train / held-out validation) and source (generated / corpus), saved as one npz.

The generated training data (data.py, cached in shards) and the prompts the base writes itself
(self_prompts.py, cached per run) are both kept in this form; train.py and pymtp trim read it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pymtp.errors import PymtpError


@dataclass
class Dataset:
    tokens: np.ndarray        # int32, all sequences concatenated
    offsets: np.ndarray       # int64, n + 1
    n_prompt: np.ndarray      # int32 per sequence: tokens before the generated part (0: corpus)
    is_val: np.ndarray        # bool per sequence
    source: np.ndarray        # uint8 per sequence: 0 generated, 1 corpus

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def seq(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    def indices(self, val: bool) -> np.ndarray:
        return np.flatnonzero(self.is_val == val)

    def summary(self) -> dict:
        lens = self.lengths()
        out = {"sequences": len(self), "tokens": self.n_tokens}
        for name, mask in (("train", ~self.is_val), ("val", self.is_val)):
            out[f"{name}_sequences"] = int(mask.sum())
            out[f"{name}_tokens"] = int(lens[mask].sum())
        out["generated_sequences"] = int((self.source == 0).sum())
        out["corpus_sequences"] = int((self.source == 1).sum())
        gen = self.source == 0
        if gen.any():
            out["mean_generated_tokens"] = float((lens[gen] - self.n_prompt[gen]).mean())
        return out

    @staticmethod
    def concat(parts: list["Dataset"]) -> "Dataset":
        parts = [p for p in parts if len(p)]
        if not parts:
            raise PymtpError("no training data (0 sequences)")
        offs, base = [np.zeros(1, np.int64)], 0
        for p in parts:
            offs.append(p.offsets[1:] + base)
            base += p.n_tokens
        return Dataset(np.concatenate([p.tokens for p in parts]), np.concatenate(offs),
                       np.concatenate([p.n_prompt for p in parts]), np.concatenate([p.is_val for p in parts]),
                       np.concatenate([p.source for p in parts]))

    @staticmethod
    def from_seqs(seqs, n_prompt, is_val, source) -> "Dataset":
        lens = np.array([len(s) for s in seqs], dtype=np.int64)
        toks = np.concatenate([np.asarray(s, np.int32) for s in seqs]) if seqs else np.zeros(0, np.int32)
        return Dataset(toks, np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
                       np.asarray(n_prompt, np.int32), np.asarray(is_val, bool), np.asarray(source, np.uint8))

    def save(self, path) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".part.npz")
        np.savez(tmp, tokens=self.tokens, offsets=self.offsets, n_prompt=self.n_prompt,
                 is_val=self.is_val, source=self.source)
        os.replace(tmp, path)

    @staticmethod
    def load(path) -> "Dataset":
        with np.load(path) as z:
            return Dataset(z["tokens"], z["offsets"], z["n_prompt"], z["is_val"], z["source"])
