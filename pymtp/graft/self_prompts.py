"""Prompts the base writes itself: the chat template is rendered up to where a user's message begins,
and the model goes on from there, writing a user's turn (the idea of Magpie, Xu et al. 2024). An
instruct model writes the kind of requests it was tuned on, so its answers to them are closer to
what users ask (MT-Bench-like questions) than answers to the built-in topic x task prompts are.

``chat_frame(tok)`` is the template's text around a user message, as token ids: (before, after).
A self-written prompt is ``before + the user's tokens + after``, the tokens the model wrote itself
(not retokenized), ready for its answer.

``write_prompts`` samples them in batches and caches them (one npz per run of the data generation);
they are sampled at the data's middle temperature (0.9 by default); a turn that does not end within
``MAX_USER_TOKENS``, or that is shorter than ``MIN_USER_TOKENS``, or that repeats an earlier one, is dropped.
"""

from __future__ import annotations

import time
from pathlib import Path

from pymtp.engine.text import cut_at_stops

SENTINEL = "\u0001pymtp-user-message\u0001"
MAX_USER_TOKENS = 128     # a user's turn longer than this is dropped (it did not end)
MIN_USER_TOKENS = 4
SPARE = 1.25              # turns sampled per prompt needed (some are dropped)


def chat_frame(tok) -> tuple[list[int], list[int]]:
    """(tokens before a user's message, tokens after it up to the assistant's reply), from the base's
    own chat template (ChatML where it has none). Memoized in ``tok`` like every tokenization, so call it
    once before PyTorch loads (pymtp.cli.graft.open_tokenizer says why)."""
    from pymtp.chat_template import render_chat

    text = render_chat(tok.chat_template, [{"role": "user", "content": SENTINEL}], add_generation_prompt=True,
                       bos_token=tok.bos_text, eos_token=tok.eos_text)
    at = text.index(SENTINEL)
    return tok.rendered_tokens(text[:at]), tok.tokenize(text[at + len(SENTINEL):], add_special=False,
                                                        parse_special=True)


def user_turn(tokens: list[int], eog_ids, piece, stops) -> list[int] | None:
    """The user's message in what the model wrote after ``before``: the tokens up to its end-of-turn
    (an end-of-generation token, or a chat stop string of a model without a template); None where the
    turn did not end or is too short."""
    eog = set(int(t) for t in eog_ids)
    end = next((i for i, t in enumerate(tokens) if int(t) in eog), None)
    cut = cut_at_stops(tokens if end is None else tokens[:end], piece, stops)
    if end is None and len(cut) == len(tokens):
        return None
    return cut if len(cut) >= MIN_USER_TOKENS else None


def write_prompts(model, tok, n: int, path, *, seed: int, temperature: float, top_p: float, gen_batch: int,
                  progress: bool = True, log=print) -> list[list[int]]:
    """``n`` distinct self-written prompts (token ids: ``before + message + after``), cached in ``path``
    (an npz that a later run with the same data key reuses). Fewer than ``n`` only if the model keeps
    writing turns that do not end or repeat; the caller cycles through what there is."""
    import torch

    from pymtp.chat_template import with_chat_stops

    from .dataset import Dataset

    path = Path(path)
    if path.is_file():
        cached = Dataset.load(path)
        log(f"self-written prompts: reusing {path}")
        return [cached.seq(i).tolist() for i in range(len(cached))]
    before, after = chat_frame(tok)
    stops = with_chat_stops(tok.chat_template)
    out, seen, batches, tried = [], set(), 0, 0
    budget = int(n * SPARE) + gen_batch
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=n, desc="writing prompts", unit="prompt", dynamic_ncols=True)
    t0 = time.time()
    while len(out) < n and tried < budget:
        b = min(gen_batch, budget - tried)
        g = torch.Generator(device=model.device).manual_seed(seed * 1_000_003 + 999_983 + batches)
        turns = model.generate([before] * b, MAX_USER_TOKENS, [temperature] * b, top_p=top_p,
                               eog_ids=tok.eog_ids, generator=g)
        batches, tried = batches + 1, tried + b
        for t in turns:
            msg = user_turn(t, tok.eog_ids, tok.piece, stops)
            if msg is None or tuple(msg) in seen or len(out) >= n:
                continue
            seen.add(tuple(msg))
            out.append(before + msg + after)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    log(f"self-written prompts: {len(out)} of {tried} turns kept ({time.time() - t0:.0f} s)")
    if not out:
        from pymtp.errors import PymtpError
        raise PymtpError("the base wrote no usable user turn (none ended within "
                         f"{MAX_USER_TOKENS} tokens): train without --self-prompts")
    n_out = len(out)   # stored as a data set whose sequences are all prompt
    Dataset.from_seqs(out, [len(p) for p in out], [False] * n_out, [0] * n_out).save(path)
    return out
