# Compare two logits dumps of bench/device/step_cost.py --dump-logits (the same model and decodes under two
# builds or settings): per batch size n = 1..8, the largest absolute difference over its rows and whether
# every row's argmax agrees.
#
#     python3 bench/device/compare_logits.py A.bin B.bin N_VOCAB
import sys

import numpy as np


def main() -> int:
    a_path, b_path, n_vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
    a = np.fromfile(a_path, dtype=np.float32).reshape(-1, n_vocab)
    b = np.fromfile(b_path, dtype=np.float32).reshape(-1, n_vocab)
    if a.shape != b.shape:
        print(f"different shapes: {a.shape} vs {b.shape}")
        return 1
    row = 0
    worst = 0.0
    for n in range(1, 9):
        x, y = a[row:row + n], b[row:row + n]
        d = float(np.abs(x - y).max())
        same = bool((x.argmax(1) == y.argmax(1)).all())
        print(f"n={n}: max |diff| {d:.3g}, bitwise {'yes' if d == 0 else 'no'}, argmax {'same' if same else 'DIFFERS'}")
        worst = max(worst, d)
        row += n
    print(f"worst |diff| {worst:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
