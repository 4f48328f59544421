"""The option a user most likely meant when they typed one a command does not have
(`commbench collectives --world 2` meant `--nproc`; `--szes` meant `--sizes`).

Two ways to be near: by meaning, for the names the same setting has in the tools commbench's
users come from (torchrun, mpirun, nccl-tests, SLURM, PyTorch scripts), and by spelling, for a
typo (difflib, on the names without their dashes, so that `--` does not make every pair look
alike). Meaning comes first: `--world` is not spelled like `--nproc`.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from typing import Any

_SAME_THING: tuple[tuple[tuple[str, ...], str], ...] = (
    # commbench's names for a setting, the first a command has offered | what others call it
    (
        ("--world", "--world-size", "--nproc"),  # all ranks
        "--world --world-size --worldsize --num-ranks --nranks --total-ranks",
    ),
    (
        ("--nproc", "--gpus-per-node", "--world"),  # ranks (GPUs) per node
        "--nproc --np --num-procs --num-processes --nproc-per-node --nprocs-per-node --procs "
        "--processes --ranks-per-node --gpus --ngpus --num-gpus --gpus-per-node -g",
    ),
    (("--nnodes", "--nodes"), "--nnodes --nodes --num-nodes --node-count --num-machines -N"),
    (("--node-rank",), "--node-rank --machine-rank --node-id --node-index"),
    (
        ("--rdzv-endpoint",),
        "--master-addr --master-address --master-port --rdzv-addr --endpoint --rdzv-endpoint",
    ),
    (
        ("--sizes", "--size"),
        "--size --sizes --msg-size --message-size --message-sizes --bytes --min-bytes "
        "--max-bytes --minbytes --maxbytes --step-bytes --stepbytes -b -e",
    ),
    (
        ("--iters",),
        "--iterations --num-iters --niters --n-iters --n-iter --repeat --repeats --reps",
    ),
    (("--warmup",), "--warmup-iters --warmup-iterations --num-warmup --warm-up -w"),
    (("--dtype",), "--datatype --data-type --dtypes --type -d"),
    (("--ops", "--op"), "--collective --collectives --coll --colls --operations --op --ops"),
    (("--reduce-op",), "--redop --red-op --reduction --reduction-op --reduce"),
    (("--backend",), "--dist-backend --distributed-backend --pg-backend"),
    (
        ("--out",),
        "--output --output-dir --outdir --out-dir --results --results-dir --output-path",
    ),
    (("--format", "--formats"), "--fmt --output-format --out-format --format --formats"),
    (("--bw",), "--bandwidth --beta --link-bw --bus-bw"),
    (("--latency",), "--alpha --lat --latency-us"),
    (("--src",), "--source --from-gpu --src-gpu"),
    (("--dst",), "--dest --destination --to --dst-gpu"),
    (("--tolerance",), "--threshold --tol --max-drop"),
    (("--time",), "--time-limit --walltime --wall-time"),
    (("--job-name",), "--name -J"),
)

_TARGETS: dict[str, tuple[str, ...]] = {}
"""Every other name of a setting -> commbench's names for it, in the order offered."""
for _targets, _names in _SAME_THING:
    for _name in _names.split():
        _TARGETS[_name] = _TARGETS.get(_name, ()) + _targets

_CLOSE_ENOUGH = 0.7
"""difflib's ratio, on the names without dashes, from which a spelling counts as a typo:
`szes`/`sizes` 0.91, `ouput`/`out` 0.75, `bogus`/`ops` 0.5 (no suggestion)."""


def unknown_option(typed: str, command: Any, ctx: Any) -> str:
    """The message for an option `command` (a Typer command, parsed in `ctx`) does not have:
    `No such option: --world; did you mean --nproc?`, or without the question when nothing
    is near enough."""
    known = [
        name
        for param in command.get_params(ctx)
        if param.param_type_name == "option" and not param.hidden
        for name in (*param.opts, *param.secondary_opts)
    ]
    meant = nearest_option(typed, known)
    return f"No such option: {typed}" + (f"; did you mean {meant}?" if meant else "")


def nearest_option(typed: str, known: Collection[str]) -> str | None:
    """The option of `known` (a command's names, `--sizes` and `-s`) that `typed` most likely
    meant, or None when none is near enough to offer: another tool's name for one of them,
    else a typo of one, else a typo of another tool's name (`--wrld`)."""
    spelled = typed.replace("_", "-")
    if spelled.startswith("--"):  # -N is not -n
        spelled = spelled.lower()
    if spelled in known:  # --min_time, --Sizes
        return spelled
    meant = _meaning(spelled, known)
    if meant is not None:
        return meant
    if not spelled.startswith("--"):  # a one-letter typo is near every one-letter option
        return None
    found = _close(spelled, [name for name in known if name.startswith("--")])
    if found:
        return found[0]
    return next((m for name in _close(spelled, _TARGETS) if (m := _meaning(name, known))), None)


def _meaning(name: str, known: Collection[str]) -> str | None:
    """The first of commbench's names for what `name` means elsewhere that `known` holds."""
    return next((target for target in _TARGETS.get(name, ()) if target in known), None)


def _close(typed: str, names: Collection[str]) -> list[str]:
    """`names` spelled like `typed`, the nearest first (compared without leading dashes)."""
    bare = {name.lstrip("-"): name for name in names}
    matches = difflib.get_close_matches(typed.lstrip("-"), bare, n=3, cutoff=_CLOSE_ENOUGH)
    return [bare[match] for match in matches]
