"""What a run may name, and the bounds of what it may ask for: declared once, here, below
everything that uses them. The command line checks its flags against them (through
`collectives.specs`, `collectives.settings`, `diagnose.settings`), and every reader of a
stored file (`results.schema`, `results.record`) checks the same fields of run.json,
results.json and suite.json against them, so an edited file can hold nothing that a command
would have refused.
"""

from __future__ import annotations

from commbench.ops import OPS

OP_NAMES = tuple(OPS)
"""Every op, in display order (`--ops`): the names of `commbench.ops.OPS`, each op's one
declaration."""
STRATEGY_NAMES = ("direct", "reduce_broadcast", "reduce_scatter_all_gather", "ring", "ring_naive")
"""Every all-reduce strategy (`--strategies`), in display order."""
DTYPES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int32": 4,
    "int64": 8,
    "int8": 1,
    "uint8": 1,
}
"""`--dtype` names and their element sizes in bytes."""
DTYPE_ALIASES: dict[str, str] = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp64": "float64",
    "half": "float16",
    "float": "float32",
    "double": "float64",
}
"""Other names `--dtype` takes, as nccl-tests (`-d half`, `float`, `double`) and mixed-precision
configs (`fp16`, `bf16`) spell them: read as the name they stand for, which is the one a run
stores, so that `fp16` and `float16` runs stay one series."""
REDUCE_OPS = ("sum", "avg", "max", "min", "prod")
ALL = "all"
"""`--dtype all`, `--reduce-op all` (nccl-tests' `-d all`, `-o all`): every name there is."""
BACKENDS = ("nccl", "gloo")
"""torch.distributed backends commbench runs (`--backend`)."""
DEVICES = ("cuda", "cpu")
"""Where buffers live (`--device`)."""
IN_PLACE = ("no", "yes", "both")
"""`--in-place`."""
DIAGNOSE_STAGES = ("intra", "inter")
"""`diagnose --stages`."""

DEFAULT_TIMEOUT = 300.0
"""Seconds without progress before a run is declared hung (`--timeout`)."""
# Below this, a healthy rank looks hung: ranks report progress in heartbeats every 0.5 s
# (`launch.protocol.HEARTBEAT_INTERVAL`) and one silent for half the timeout is blamed, so
# `--timeout 0.001` would name ranks that were measuring normally.
MIN_TIMEOUT = 2.0
MAX_SECONDS = 1e9
"""The longest `--timeout` or `--min-time` (31 years) a run is given and its run.json is read
with: past it a duration is a typo, and the workers' backstop (twice the timeout) would
overflow the waits it is given to (`threading.TIMEOUT_MAX`, about 9.2e9 s)."""
# More workers than any node runs: the preflight refuses what this node cannot hold (its
# GPUs, 8 CPU ranks per core); this keeps an absurd number out of the arithmetic before it,
# and out of a script written for other nodes.
MAX_NPROC = 1 << 20
# More nodes than any machine has (the largest have about ten thousand): a node list or a
# node count past it is a typo, refused before `n[0-30000000]` becomes 30 million names.
MAX_NODES = 65536

# The regression gate's defaults (`compare.GateSettings`): here, below the gate, so that
# `compare --help` states them without loading the gate's statistics.
DEFAULT_TOLERANCE = 0.05
DEFAULT_LATENCY_TOLERANCE = 0.15
DEFAULT_ALPHA = 0.01
# The same limit `commbench collectives` warns at: above it, one run's median is not a
# reliable estimate of the next run's.
DEFAULT_NOISY_CV = 0.2
