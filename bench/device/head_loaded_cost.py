"""What a loaded head and a sleeping MTP side cost on a GPU, next to the noise floor.

The built-in model at temperature T for P passes of 16 MT-Bench first turns x 192 tokens: MTP off, a
second MTP off (the noise floor), a Model with the head loaded but no MTP context (n_draft=0: what a
loaded head costs by itself) and the default (auto), interleaved per prompt in a rotated order.
Run from /tmp with PYMTP_CACHE_DIR set:

    python3 bench/device/head_loaded_cost.py 0.7 2
"""

from __future__ import annotations

import sys

from pymtp import Model
from pymtp.bench.prompts import load_prompts


def main() -> None:
    temp, passes = float(sys.argv[1]), int(sys.argv[2])
    models = {"off": Model(mtp="off", n_gpu_layers=99), "off2": Model(mtp="off", n_gpu_layers=99),
              "nd0": Model(n_draft=0, n_gpu_layers=99), "auto": Model(n_draft="auto", n_gpu_layers=99)}
    print({k: m.mtp_reason for k, m in models.items()})
    prompts = [models["off"].chat_tokens([{"role": "user", "content": p}]) for p in load_prompts("mtbench")[:16]]
    names = list(models)
    ms = dict.fromkeys(names, 0.0)
    tok = dict.fromkeys(names, 0)
    asleep = 0
    i = 0
    for _ in range(passes):
        for p in prompts:
            for n in names[i % 4:] + names[:i % 4]:
                m = models[n]
                m.reset()
                gen = dict(max_tokens=192, temperature=temp, seed=i)
                if n == "auto":
                    gen.update(n_draft="auto", draft="auto")
                s = m.generate(p, **gen).stats
                ms[n] += s.generate_ms
                tok[n] += s.n_generated
                if n == "auto":
                    asleep += s.adaptive.get("dormant_steps", 0)
            i += 1
    for n in names:
        print(f"{n:5s} {1000 * tok[n] / ms[n]:8.2f} tok/s {tok[n] / ms[n] / (tok['off'] / ms['off']):.3f}x")
    print("auto asleep steps", asleep)


if __name__ == "__main__":
    main()
