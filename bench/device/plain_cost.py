# The built-in model on a GPU: MTP off vs MTP on with n_draft=0 (catch-up every step), "auto" and 1, one
# Model per side, interleaved per prompt, without the bench's other configurations in between (each of
# which changes the decode size the next run starts from). Run from /tmp with PYMTP_CACHE_DIR set:
#     python3 bench/device/plain_cost.py
import time

import pymtp
from pymtp.bench.prompts import load_prompts

texts = load_prompts("mtbench")[:12]
on = pymtp.Model(n_gpu_layers=99, mtp="on")
off = pymtp.Model(n_gpu_layers=99, mtp="off")
prompts = [off.chat_tokens([{"role": "user", "content": t}]) for t in texts]
res = {}


def run(name, m, p, **kw):
    m.reset()
    out = m.generate(p, max_tokens=256, **kw)
    r = res.setdefault(name, [0, 0.0, 0.0, 0])
    s = out.stats
    for i, v in enumerate((s.n_generated, s.generate_ms, s.verify_ms + s.sample_ms, s.n_steps)):
        r[i] += v


t0 = time.perf_counter()
for p in prompts:
    run("off", off, p)
    run("on k=0", on, p, n_draft=0)
    run("on auto", on, p, n_draft="auto")
    run("on k=1", on, p, n_draft=1)
for k, (n, ms, vms, steps) in res.items():
    print(f"{k:10s} {n / ms * 1000:8.1f} tok/s  wall/step {ms / max(steps, 1):.3f} ms  "
          f"verify+sample/step {vms / max(steps, 1):.3f} ms  steps {steps}")
print(f"{time.perf_counter() - t0:.0f} s")
