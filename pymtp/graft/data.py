"""Training data: text the base model itself generates (half of it greedy - pymtp's default decoding -
half sampled at temperature ~U(0.8, 1.0), top-p 0.95) in answer to the built-in prompt set and,
optionally, to user turns it writes itself from its chat template (self_prompts.py), plus
optional plain-text corpus files, as token ids. Generated data is cached on disk in shards (npz),
so an interrupted run resumes generation where it stopped and later runs with the same settings
reuse it.

Held-out validation sequences come from prompts never used for training (and every 20th
corpus chunk).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from pymtp.engine.text import cut_at_stops
from pymtp.errors import PymtpError

from .dataset import Dataset
from .prompts import MAX_UNIQUE_PROMPTS, build_prompts, unique_prompts

DATA_VERSION = 3          # bump when the prompt set or the generation recipe changes (2: role-play,
                          # extraction, reasoning, essay and more math prompts; up to 60000 distinct;
                          # 3: replies of a model without a chat template end at ChatML's turn markers)
MIN_SEQ_TOKENS = 4


@dataclass(frozen=True)
class GenConfig:
    samples: int = 10000              # generated sequences
    gen_tokens: int = 256             # new tokens per sequence (at most)
    seed: int = 0
    temp_min: float = 0.8
    temp_max: float = 1.0
    greedy_frac: float = 0.5          # share of sequences decoded greedily (pymtp's default mode)
    top_p: float = 0.95
    val_frac: float = 0.05            # share of prompts held out for validation
    self_prompts: float = 0.0         # share of sequences whose prompt the base writes itself (self_prompts.py)

    def key(self, base_sha256: str) -> str:
        d = dict(self.__dict__, base=base_sha256, version=DATA_VERSION)
        if not self.self_prompts:     # (the key of a data set without them is the one it always had)
            del d["self_prompts"]
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- generation

def sample_plan(cfg: GenConfig):
    """(prompts, [(prompt index, temperature, is_val)] per sample), deterministic by seed. An index
    ``len(prompts) + j`` is the j-th prompt the base writes itself (``cfg.self_prompts`` of the samples,
    spread evenly; the first ``val_frac`` of them held out)."""
    n_unique = max(2, min(cfg.samples, MAX_UNIQUE_PROMPTS))
    prompts = unique_prompts(cfg.samples, seed=cfg.seed)
    n_val = min(n_unique - 1, max(1, round(cfg.val_frac * n_unique)))
    n_self = round(cfg.self_prompts * cfg.samples)
    n_self_val = min(n_self - 1, max(1, round(cfg.val_frac * n_self))) if n_self > 1 else 0
    plan, j = [], 0
    for i in range(cfg.samples):
        r = random.Random(f"{cfg.seed}:{i}")
        temp = 0.0 if r.random() < cfg.greedy_frac else r.uniform(cfg.temp_min, cfg.temp_max)
        if (i + 1) * n_self // cfg.samples > i * n_self // cfg.samples:
            plan.append((len(prompts) + j, temp, j < n_self_val))
            j += 1
            continue
        pi = i % n_unique
        plan.append((pi, temp, pi < n_val))
    return prompts, plan


def generate_dataset(model, tokenizer, cfg: GenConfig, cache_dir, base_sha256: str, *,
                     gen_batch: int = 32, max_prompt_tokens: int = 512, progress: bool = True,
                     log=print) -> Dataset:
    """Sample the base's own continuations of the built-in prompts and of the prompts it writes itself
    (``cfg.self_prompts``; cached in shards). A reply to a chat
    prompt of a model without a chat template (ChatML stands in) ends where ChatML's turn markers begin, as
    Model.chat and `pymtp chat` end it: a base model writes them as text and goes on with the next turns,
    which no chat surface shows (Gemma 3 270M's greedy replies), so the head does not learn from them."""
    import torch

    from pymtp.chat_template import with_chat_stops

    chat_stops = with_chat_stops(tokenizer.chat_template)

    key = cfg.key(base_sha256)
    root = Path(cache_dir) / f"gen-{key}"
    final = root / "data.npz"
    if final.is_file():
        log(f"generated data: reusing {final}")
        return Dataset.load(final)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(dict(cfg.__dict__, base_sha256=base_sha256,
                                                      version=DATA_VERSION), indent=2))
    prompts, plan = sample_plan(cfg)
    prompt_toks = {}
    n_self = sum(pi >= len(prompts) for pi, _, _ in plan)
    own = []
    if n_self:
        from .self_prompts import write_prompts

        own = write_prompts(model, tokenizer, n_self, root / "self-prompts.npz", seed=cfg.seed,
                            temperature=(cfg.temp_min + cfg.temp_max) / 2, top_p=cfg.top_p, gen_batch=gen_batch,
                            progress=progress, log=log)
        if len(own) < n_self:
            log(f"self-written prompts: {len(own)} for {n_self} sequences; some are answered more than once")

    def is_chat(pi):
        return pi >= len(prompts) or isinstance(prompts[pi], list)

    def toks(pi):
        if pi >= len(prompts):
            return own[(pi - len(prompts)) % len(own)][:max_prompt_tokens]
        if pi not in prompt_toks:
            p = prompts[pi]
            t = tokenizer.chat_tokens(p) if isinstance(p, list) else tokenizer.tokenize(p)
            prompt_toks[pi] = t[:max_prompt_tokens]
        return prompt_toks[pi]

    n_shards = (cfg.samples + gen_batch - 1) // gen_batch
    parts = []
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=cfg.samples, desc="generating", unit="seq", dynamic_ncols=True)
    t0, n_new_tokens = time.time(), 0
    for s in range(n_shards):
        shard = root / f"shard-{s:05d}-of-{n_shards:05d}.npz"
        rows = plan[s * gen_batch:(s + 1) * gen_batch]
        if shard.is_file():
            parts.append(Dataset.load(shard))
        else:
            ps = [toks(pi) for pi, _, _ in rows]
            g = torch.Generator(device=model.device).manual_seed(cfg.seed * 1_000_003 + s)
            outs = model.generate(ps, cfg.gen_tokens, [t for _, t, _ in rows], top_p=cfg.top_p,
                                  eog_ids=tokenizer.eog_ids, generator=g)
            outs = [cut_at_stops(o, tokenizer.piece, chat_stops) if is_chat(pi) else o
                    for o, (pi, _, _) in zip(outs, rows)]
            n_new_tokens += sum(len(o) for o in outs)
            seqs = [p + o for p, o in zip(ps, outs)]
            keep = [i for i, q in enumerate(seqs) if len(q) >= MIN_SEQ_TOKENS]
            ds = Dataset.from_seqs([seqs[i] for i in keep], [len(ps[i]) for i in keep],
                                   [rows[i][2] for i in keep], [0] * len(keep))
            ds.save(shard)
            parts.append(ds)
        if bar is not None:
            bar.update(len(rows))
            el = time.time() - t0
            if n_new_tokens:
                bar.set_postfix_str(f"{n_new_tokens / max(el, 1e-9):.0f} tok/s")
    if bar is not None:
        bar.close()
    data = Dataset.concat(parts)
    data.save(final)
    return data


# --------------------------------------------------------------------------- corpus

def corpus_dataset(files, tokenizer, seq_len: int, val_every: int = 20) -> Dataset:
    """Plain-text files cut into sequences of ``seq_len`` tokens (each starting with BOS where
    the model adds one); every ``val_every``-th chunk is held out."""
    seqs = []
    for f in files:
        try:
            text = Path(f).read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise PymtpError(f"cannot read corpus file {f}: {e.strerror or e}") from e
        ids = tokenizer.tokenize(text, add_special=False, parse_special=False)
        bos = [tokenizer.bos_id] if tokenizer.add_bos and tokenizer.bos_id >= 0 else []
        step = seq_len - len(bos)
        for i in range(0, len(ids), step):
            chunk = bos + ids[i:i + step]
            if len(chunk) >= MIN_SEQ_TOKENS:
                seqs.append(chunk)
    n = len(seqs)
    return Dataset.from_seqs(seqs, [0] * n, [(i % val_every) == val_every - 1 for i in range(n)], [1] * n)


def held_out_prompts(gen: GenConfig, n: int) -> list:
    """``n`` built-in prompts never trained on: the generation plan's validation prompts, then (for a
    small plan) the prompt set's next ones, which no sample uses."""
    prompts, plan = sample_plan(gen)
    held = [prompts[pi] for pi in sorted({pi for pi, _, is_val in plan if is_val and pi < len(prompts)})][:n]
    if len(held) < n:
        held += build_prompts(len(prompts) + n - len(held), seed=gen.seed)[len(prompts):]
    return held


def default_cache_dir() -> Path:
    """$PYMTP_CACHE_DIR/graft (or ~/.cache/pymtp/graft)."""
    from pymtp.default_model import cache_root

    return cache_root() / "graft"
