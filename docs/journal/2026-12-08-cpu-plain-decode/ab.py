# A/B of the sgemm routing: modes run in separate processes, round-robin.
import json, os, subprocess, sys, statistics
model, threads, rounds, reps, sizes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
modes = sys.argv[6].split(",")
res = {m: {} for m in modes}
for r in range(rounds):
    order = modes[r % len(modes):] + modes[:r % len(modes)]
    for m in order:
        env = dict(os.environ)
        k, v = m.split("=")
        env[k] = v
        out = f"/work/ab/tmp-{os.getpid()}.json"
        subprocess.run([sys.executable, "/work/main/bench/cpu_verify_cost.py", model, "--threads", threads,
                        "--reps", reps, "--sizes", sizes, "--json", out], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        d = json.load(open(out))
        for n, t in d["ms"].items():
            res[m].setdefault(n, []).extend(t)
        for n, t in d["cpu_ms"].items():
            res[m].setdefault("cpu" + n, []).extend(t)
print(f"model {os.path.basename(model)} threads {threads} rounds {rounds} reps {reps}")
base = modes[0]
for m in modes:
    line = [f"{m:22s}"]
    for n in sizes.split(","):
        med = statistics.median(res[m][n]); cm = statistics.median(res[m]["cpu" + n])
        line.append(f"n={n}: {med:7.2f} ms (cpu {cm:7.2f})")
    print("  ".join(line))
print("V(n) own one-row:", {m: [round(statistics.median(res[m][n]) / statistics.median(res[m]["1"]), 3) for n in sizes.split(",")] for m in modes})
print("V(n) vs upstream one-row (mode 1):", {m: [round(statistics.median(res[m][n]) / statistics.median(res[modes[1]]["1"]), 3) for n in sizes.split(",")] for m in modes} if len(modes) > 1 else "")
json.dump(res, open(f"/work/ab/ab-{os.path.basename(model)}-t{threads}.json", "w"))
