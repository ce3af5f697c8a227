#!/usr/bin/env python3
"""pymtp's llama-server against pristine upstream at its best, side by side, round-robin.

Every speed claim of pymtp is measured with this script (docs/benchmarks.md, "How we measure"):

- **Upstream at its best**: llama-server built from the pinned llama.cpp tree without pymtp's patches and
  with its own ggml (static, CPU or CUDA: `build_upstream`, or `--upstream-bin` built the same way by
  bench/device/build_cuda.sh with PRISTINE_GGML=own), run with its own `--backend-sampling` (on by default here;
  the `nobs` option of a config turns it off: "upstream default flags"), at several draft lengths.
- **pymtp as users run it**: `--mtp` with no other flag (the default: the adaptive controller, fresh server),
  next to fixed draft lengths at equal k.
- All servers are up at once; the prompts go round-robin (prompt by prompt, rotating who goes first), so
  drift hits every configuration alike. Ratios, not absolute times, are the result.

Configurations (`--configs`, comma-separated; options after ':'):

    plain               upstream llama-server, no speculation (with --backend-sampling unless :nobs)
    upstream:k=3        upstream --spec-type draft-mtp --spec-draft-n-max 3 (--backend-sampling unless :nobs)
    pymtp               pymtp's llama-server --mtp, defaults only (adaptive draft length)
    pymtp:k=3           pymtp --mtp --mtp-adaptive off --mtp-n-draft 3 (every step drafts 3)
    pymtp:cap=3         pymtp --mtp --mtp-n-draft 3 (adaptive, at most 3)
    pymtp-off           pymtp's llama-server without --mtp (plain decoding through pymtp's libraries)
  options: nobs / bs (backend sampling off / on), env=VAR=VALUE (this server's environment; repeatable),
           label=NAME (the row's name), extra=ARG (one more server argument; repeatable)

Per request the JSON keeps tokens, decode ms, prompt tokens and ms, the wall time of the whole request
(end to end), drafted/accepted and the response's `timings.mtp` (verify_sampling, the controller's choices).
`--prefill-tokens N` adds prefill of a ~N-token prompt (3 per server); `--e2e-tokens N` adds requests of a
~N-token prompt plus -n tokens each, timed end to end. The run records the card, both builds' commits and every
server's argv and environment.

    python bench/upstream_vs_pymtp.py MODEL.gguf --ngl 99 --upstream-bin build/upstream-cuda/bin/llama-server \
        --configs plain,upstream:k=3,pymtp,pymtp:k=3 --requests 16 -n 128 \
        --synthetic-rates 0.917,0.837,0.648 --prefill-tokens 600 --e2e-tokens 512 --out r.json

MODEL must be an architecture upstream drafts for (glm4moe, deepseek2, qwen35, qwen35moe, step35, ...). With
--synthetic-rates every server accepts drafts at these per-position rates (upstream: --spec-synth-rates; pymtp:
the same engine option), so random-weight models of realistic shape measure engine cost only: say so next to
every such number. --serial runs the servers one after another (for models that do not fit as many times in
memory); drift then hits them unequally.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

DEFAULT_CONFIGS = "plain,upstream:k=3,pymtp,pymtp:k=3"


def build_upstream(backend: str, jobs: int) -> Path:
    """llama-server from the pinned sdist without patches, with its own static ggml; cached per backend."""
    import vendor  # scripts/vendor.py: the same sdist, sha256-checked

    out = ROOT / "build" / f"upstream-{backend}"
    exe = out / "bin" / "llama-server"
    if exe.is_file():
        return exe
    src = out / "src"
    if not (src / "CMakeLists.txt").is_file():
        shutil.rmtree(src, ignore_errors=True)
        vendor.extract_tree(vendor.fetch_sdist(), src)
    args = ["cmake", "-S", str(src), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
            "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF"]
    if backend == "cuda":
        args += ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=" + os.environ.get("CUDA_ARCH", "90")]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    print(f"building pristine upstream llama-server ({backend}) in {out} ...", file=sys.stderr)
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(out), "--target", "llama-server", "-j", str(jobs)], check=True,
                   stdout=subprocess.DEVNULL)
    return exe


def parse_env(text: str, flag: str) -> dict[str, str]:
    """'A=1 B=2' -> {'A': '1', 'B': '2'}; exits with a clear message on a word without '='."""
    env = {}
    for word in text.split():
        name, eq, value = word.partition("=")
        if not eq or not name:
            sys.exit(f"{flag}: expected VAR=VALUE words, got {word!r}")
        env[name] = value
    return env


@dataclass
class Config:
    """One server of the comparison: which build, which flags, which environment."""

    name: str
    kind: str                      # plain | upstream | pymtp | pymtp-off
    k: int | None = None           # upstream / pymtp fixed: the draft length
    cap: int | None = None         # pymtp adaptive: the cap (None: the engine's default)
    backend_sampling: bool | None = None  # None: the side's default (upstream rows: on)
    env: dict[str, str] = field(default_factory=dict)
    extra: list[str] = field(default_factory=list)

    @property
    def upstream_binary(self) -> bool:
        return self.kind in ("plain", "upstream")


KINDS = ("plain", "upstream", "pymtp", "pymtp-off")


def parse_config(spec: str, default_k: int) -> Config:
    """'upstream:k=3:nobs' -> Config; raises ValueError with a message naming the bad part."""
    kind, *opts = spec.strip().split(":")
    if kind not in KINDS:
        raise ValueError(f"{spec!r}: the kind must be one of {', '.join(KINDS)}")
    c = Config(name="", kind=kind)
    for opt in opts:
        key, eq, value = opt.partition("=")
        if key in ("bs", "nobs") and not eq:
            c.backend_sampling = key == "bs"
        elif key in ("k", "cap") and eq:
            try:
                n = int(value)
            except ValueError:
                raise ValueError(f"{spec!r}: {key}= takes a whole number, got {value!r}") from None
            if not 1 <= n <= 16:
                raise ValueError(f"{spec!r}: {key}= must be 1..16")
            setattr(c, key, n)
        elif key == "env" and eq:
            name, eq2, val = value.partition("=")
            if not eq2 or not name:
                raise ValueError(f"{spec!r}: env= takes VAR=VALUE")
            c.env[name] = val
        elif key == "label" and eq and value:
            c.name = value
        elif key == "extra" and eq and value:
            c.extra.append(value)
        else:
            raise ValueError(f"{spec!r}: unknown option {opt!r} (bs, nobs, k=N, cap=N, env=VAR=VALUE, label=NAME, "
                             "extra=ARG)")
    if c.kind == "upstream" and c.k is None:
        c.k = default_k
    if c.cap is not None and (c.kind != "pymtp" or c.k is not None):
        raise ValueError(f"{spec!r}: cap= is for adaptive pymtp rows (no k=)")
    if c.k is not None and c.kind not in ("upstream", "pymtp"):
        raise ValueError(f"{spec!r}: k= is for upstream and pymtp rows")
    if not c.name:
        bs = {True: " bs", False: " nobs", None: ""}[c.backend_sampling]
        what = {"plain": "plain", "pymtp-off": "pymtp off", "upstream": f"upstream k={c.k}",
                "pymtp": f"pymtp k={c.k}" if c.k else (f"pymtp auto<={c.cap}" if c.cap else "pymtp default")}[c.kind]
        c.name = what + bs + "".join(f" {a}={b}" for a, b in c.env.items() if a != "PYMTP_ADAPTIVE_TRACE")
    return c


def rates_for(synth: list[str], n: int, pad: bool) -> list[str]:
    """One synthetic rate per draft position up to n, as both servers require: the first n of ours; past them
    0 where `pad` (a position past the given rates never accepts: pymtp's adaptive cap), else a clear exit
    (upstream at a k longer than the rates given)."""
    if not synth:
        return []
    rates = synth[1].split(",")
    if len(rates) < n and not pad:
        sys.exit(f"--synthetic-rates has {len(rates)} rates; upstream at k={n} needs one per draft position")
    return [synth[0], ",".join((rates + ["0"] * n)[:n])]


def server_argv(c: Config, upstream: Path, pymtp_bin: Path, common: list[str], synth: list[str]) -> list[str]:
    from pymtp import options

    if c.upstream_binary:
        argv = [str(upstream), *common]
        if c.backend_sampling is not False:
            argv.append("--backend-sampling")
        if c.kind == "upstream":
            argv += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(c.k), *rates_for(synth, c.k, pad=False)]
    else:
        argv = [str(pymtp_bin), *common]
        if c.backend_sampling:
            argv.append("--backend-sampling")
        if c.kind == "pymtp":
            argv.append("--mtp")
            if c.k is not None:
                argv += ["--mtp-adaptive", "off", "--mtp-n-draft", str(c.k)]
            elif c.cap is not None:
                argv += ["--mtp-n-draft", str(c.cap)]
            argv += rates_for(synth, c.k or c.cap or options.ADAPTIVE_MAX_DRAFT, pad=True)
    return argv + c.extra


class Server:
    def __init__(self, name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None) -> None:
        from pymtp.server import free_port, start_server, wait_until_ready

        self.name = name
        self.argv = argv
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
        self.log = open(log_dir / f"{safe}.log", "wb")
        t0 = time.perf_counter()
        self.proc = start_server(argv + ["--port", str(self.port)], stdout=self.log, stderr=subprocess.STDOUT,
                                 env={**os.environ, **(env or {})})
        wait_until_ready(self.url, self.proc, timeout=900)
        self.load_s = time.perf_counter() - t0

    def complete(self, prompt: str, n: int, temp: float, seed: int) -> dict:
        body = {"prompt": prompt, "n_predict": n, "temperature": temp, "seed": seed, "cache_prompt": False}
        req = urllib.request.Request(self.url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=900) as r:
            res = json.loads(r.read())
        res["_wall_s"] = time.perf_counter() - t0
        return res

    def stop(self) -> None:
        from pymtp.server import stop_server

        stop_server(self.proc, timeout=30)
        self.log.close()


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return (out.stdout or out.stderr).strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_record(upstream: Path, pymtp_bin: Path) -> dict:
    import vendor

    return {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "gpu": _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]),
            "pymtp_commit": _run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"]),
            "pymtp_dirty": bool(_run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])),
            "upstream_commit": vendor.UPSTREAM_COMMIT, "upstream_bin": str(upstream), "pymtp_bin": str(pymtp_bin),
            "upstream_version": _run([str(upstream), "--version"]),
            "pymtp_version": _run([str(pymtp_bin), "--version"])}


def row_of(r: dict) -> dict:
    t = r["timings"]
    return {"tokens": t["predicted_n"], "ms": t["predicted_ms"], "prompt_n": t.get("prompt_n", 0),
            "prompt_ms": t.get("prompt_ms", 0.0), "wall_s": r["_wall_s"], "draft_n": t.get("draft_n", 0),
            "draft_n_accepted": t.get("draft_n_accepted", 0), "mtp": t.get("mtp"), "text": r["content"]}


def decode_tps(rows: list[dict]) -> float:
    ms = sum(x["ms"] for x in rows)
    return sum(x["tokens"] for x in rows) / (ms / 1e3) if ms > 0 else 0.0


def prefill_tps(rows: list[dict]) -> float:
    ms = sum(x["prompt_ms"] for x in rows)
    return sum(x["prompt_n"] for x in rows) / (ms / 1e3) if ms > 0 else 0.0


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarize(names: list[str], runs: dict, prefill: dict, e2e: dict, walls: dict, parallel: int) -> dict:
    def tps(name):
        if parallel > 1:   # aggregate: every token over the wall time of the rounds
            return sum(x["tokens"] for x in runs[name]) / sum(walls[name])
        return decode_tps(runs[name])

    ref = names[0]
    out = {}
    for name in names:
        d = sum(x["draft_n"] for x in runs[name])
        a = sum(x["draft_n_accepted"] for x in runs[name])
        plans = [x["mtp"]["adaptive"]["steps_per_draft_length"] for x in runs[name]
                 if isinstance(x.get("mtp"), dict) and isinstance(x["mtp"].get("adaptive"), dict)]
        out[name] = {
            "tok_s": tps(name), f"vs_{ref}": tps(name) / tps(ref), "drafted": d, "accepted": a,
            "prefill_tok_s": prefill_tps(runs[name]), "wall_s_mean": mean([x["wall_s"] for x in runs[name]]),
            "long_prefill_tok_s": prefill_tps(prefill[name]),
            "e2e_wall_s_mean": mean([x["wall_s"] for x in e2e[name]]),
            "verify_sampling": sorted({x["mtp"].get("verify_sampling") for x in runs[name]
                                       if isinstance(x.get("mtp"), dict)}),
            "last_steps_per_draft_length": plans[-1] if plans else None,
            "per_prompt_ratio": [(x["tokens"] / x["ms"]) / (y["tokens"] / y["ms"])
                                 for x, y in zip(runs[name], runs[ref]) if x["ms"] > 0 and y["ms"] > 0],
        }
    return out


def print_table(names: list[str], summ: dict, ref: str) -> None:
    hdr = (f"{'config':<34} {'tok/s':>8} {'vs ' + ref[:10]:>14} {'acc/drafted':>13} {'wall s':>7} "
           f"{'prefill':>8} {'long pf':>8} {'e2e s':>7}")
    print("\n" + hdr)
    for n in names:
        s = summ[n]
        print(f"{n:<34} {s['tok_s']:>8.1f} {s[f'vs_{ref}']:>13.3f}x {s['accepted']:>6}/{s['drafted']:<6} "
              f"{s['wall_s_mean']:>7.2f} {s['prefill_tok_s']:>8.0f} {s['long_prefill_tok_s']:>8.0f} "
              f"{s['e2e_wall_s_mean']:>7.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS,
                    help=f"comma-separated configurations, the first is the reference (default: {DEFAULT_CONFIGS})")
    ap.add_argument("--n-draft", type=int, default=3, help="k of 'upstream' rows without k= (default: 3)")
    ap.add_argument("--prompts", default="mtbench")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cuda", action="store_true", help="build upstream with CUDA (pymtp must be a CUDA build too)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--synthetic-rates", default=None, help="per-position acceptance rates for every MTP server")
    ap.add_argument("--upstream-bin", default=None, help="a prebuilt pristine llama-server (its own ggml)")
    ap.add_argument("--parallel", type=int, default=1, metavar="N",
                    help="N slots per server (-np N) and N clients at once; tok/s is then the aggregate")
    ap.add_argument("--serial", action="store_true", help="one server at a time (models too large to hold N times)")
    ap.add_argument("--log-dir", default=None, help="where the servers' logs go (default: a new temp dir)")
    ap.add_argument("--server-extra", default="", metavar="ARGS", help="more arguments for every server")
    ap.add_argument("--prefill-tokens", type=int, default=0, metavar="N",
                    help="also time the prefill of a ~N-token prompt (3 per server, 1 token generated)")
    ap.add_argument("--e2e-tokens", type=int, default=0, metavar="N",
                    help="also time requests of a ~N-token prompt + -n tokens end to end (4 per server)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    # bad input fails here, before a pristine server is built
    if args.parallel < 1:
        sys.exit("--parallel: at least 1")
    if args.parallel > 1 and args.serial:
        sys.exit("--parallel and --serial: choose one")
    try:
        configs = [parse_config(s, args.n_draft) for s in args.configs.split(",") if s.strip()]
    except ValueError as e:
        sys.exit(f"--configs: {e}")
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        sys.exit(f"--configs: two rows share a name ({names}); give one a label=NAME")
    if not configs:
        sys.exit("--configs: nothing to run")

    from pymtp.bench.prompts import load_prompts
    from pymtp.server import server_binary

    model = Path(args.model).resolve()
    prompts = load_prompts(args.prompts)[: args.requests]
    if args.upstream_bin:
        upstream = Path(args.upstream_bin).resolve()
        if not upstream.is_file():
            sys.exit(f"--upstream-bin {upstream}: no such file")
    elif any(c.upstream_binary for c in configs):
        upstream = build_upstream("cuda" if args.cuda else "cpu", args.jobs)
    else:
        upstream = Path("-")
    pymtp_bin = Path(server_binary())
    common = ["-m", str(model), "-c", str(args.ctx * args.parallel), "-np", str(args.parallel), "--no-webui",
              "--host", "127.0.0.1"]
    if args.ngl:
        common += ["-ngl", str(args.ngl)]
    if args.threads:
        common += ["-t", str(args.threads), "-tb", str(args.threads)]
    common += args.server_extra.split()
    synth = ["--spec-synth-rates", args.synthetic_rates] if args.synthetic_rates else []
    argvs = {c.name: server_argv(c, upstream, pymtp_bin, common, synth) for c in configs}
    envs = {c.name: c.env for c in configs}

    def long_text(n_tokens: int) -> str:  # the prompts themselves, repeated, cut at ~0.75 words per token
        words: list[str] = []
        while len(words) < 0.75 * n_tokens:
            words += " ".join(prompts).split()
        return " ".join(words[:int(0.75 * n_tokens)]) + "\n"
    long_prompt = long_text(args.prefill_tokens) if args.prefill_tokens else ""
    e2e_prompts = ([long_text(args.e2e_tokens) + "\nAnswer the last question above.\n" + p for p in prompts[:4]]
                   if args.e2e_tokens else [])
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="pymtp-vs-upstream-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    runs = {n: [] for n in names}
    walls = {n: [] for n in names}
    prefill = {n: [] for n in names}
    e2e = {n: [] for n in names}

    def extras(name: str, s: Server) -> None:
        for rep in range(3 if long_prompt else 0):
            prefill[name].append(row_of(s.complete(long_prompt, 1, 0.0, rep)))
        for i, p in enumerate(e2e_prompts):
            e2e[name].append(row_of(s.complete(p, args.n, args.temp, 1000 + i)))

    def run_round(name: str, s: Server) -> None:
        import concurrent.futures as cf

        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(args.parallel) as ex:
            res = list(ex.map(lambda ip: s.complete(ip[1], args.n, args.temp, ip[0]), enumerate(prompts)))
        walls[name].append(time.perf_counter() - t0)
        runs[name].extend(row_of(r) for r in res)

    loads = {}
    if args.serial:
        for c in configs:
            s = Server(c.name, argvs[c.name], log_dir, envs[c.name])
            loads[c.name] = s.load_s
            try:
                for i, p in enumerate(prompts):
                    runs[c.name].append(row_of(s.complete(p, args.n, args.temp, i)))
                extras(c.name, s)
                print(f"  {c.name}: {len(prompts)} prompts", file=sys.stderr)
            finally:
                s.stop()
    else:
        servers: dict[str, Server] = {}
        try:
            for c in configs:
                servers[c.name] = Server(c.name, argvs[c.name], log_dir, envs[c.name])
                loads[c.name] = servers[c.name].load_s
            order = list(servers.items())
            # no warm-up request: the first prompts are what a fresh server answers (the default's learning shows)
            if args.parallel > 1:   # two rounds of all prompts per server, servers in turn
                for rnd in range(2):
                    for name, s in order[rnd % len(order):] + order[: rnd % len(order)]:
                        run_round(name, s)
                        print(f"  round {rnd + 1}, {name}: {walls[name][-1]:.1f} s", file=sys.stderr)
            else:                   # prompt by prompt, rotating who goes first
                for i, p in enumerate(prompts):
                    for name, s in order[i % len(order):] + order[: i % len(order)]:
                        runs[name].append(row_of(s.complete(p, args.n, args.temp, i)))
                    print(f"  prompt {i + 1}/{len(prompts)}", file=sys.stderr)
            for name, s in servers.items():
                extras(name, s)
        finally:
            for s in servers.values():
                s.stop()

    summ = summarize(names, runs, prefill, e2e, walls, args.parallel)
    print_table(names, summ, names[0])
    result = {"model": str(model), **machine_record(upstream, pymtp_bin), "args": vars(args),
              "synthetic_acceptance": bool(args.synthetic_rates),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "log_dir": str(log_dir),
              "servers": {n: {"argv": argvs[n], "env": envs[n], "load_s": loads.get(n)} for n in names},
              "configs": summ, "requests": runs, "long_prefill": prefill, "e2e": e2e}
    # pairwise: each pymtp row against each upstream row (the headline ratios)
    pairs = {}
    for c in configs:
        if c.kind != "pymtp":
            continue
        for u in configs:
            if u.kind == "upstream":
                pairs[f"{c.name} / {u.name}"] = summ[c.name]["tok_s"] / summ[u.name]["tok_s"]
    result["pymtp_vs_upstream"] = pairs
    if pairs:
        print()
        for k, v in pairs.items():
            print(f"{k:<60} {v:.3f}x")
    if args.synthetic_rates:
        print("(synthetic acceptance: these ratios measure engine cost only)")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
