"""A copy of a head GGUF with its f16 matrices re-quantized: requant_head.py HEAD OUT [Q8_0|Q4_0]."""

import sys

import gguf
import numpy as np
from gguf.quants import quantize

from pymtp.graft.writer import copy_gguf


def main() -> None:
    src, out = sys.argv[1], sys.argv[2]
    qtype = getattr(gguf.GGMLQuantizationType, sys.argv[3] if len(sys.argv) > 3 else "Q8_0")
    reader = gguf.GGUFReader(src)
    replaced = {}
    for t in reader.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.F16 and len(t.shape) == 2 and int(t.shape[0]) % 32 == 0:
            replaced[t.name] = (quantize(np.asarray(t.data).astype(np.float32), qtype), qtype)
    print(f"quantized {len(replaced)} tensors to {qtype.name}")
    copy_gguf(src, out, tensors=replaced)


if __name__ == "__main__":
    main()
