"""Where the engine tests put the model: PYMTP_TEST_NGL=99 runs them with every layer on the GPU
(a CUDA build, e.g. on the device machine); unset, they run on the CPU as in CI."""

import os

NGL = int(os.environ.get("PYMTP_TEST_NGL", "0"))
