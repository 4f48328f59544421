"""Running inside a SLURM allocation: read the job from the environment, build the torchrun
rendezvous from it, and write a ready sbatch script.

One commbench task per node (`srun --ntasks-per-node=1`): commbench starts that node's
per-GPU workers itself through torchrun, and every node meets at a c10d rendezvous on the
first node of the job's node list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from commbench.collectives.settings import MAX_NODES
from commbench.errors import UserError, quoted
from commbench.numbers import is_digits, parse_int

# Rendezvous port on the head node: fixed base + job id, so two jobs sharing a node do not
# collide, and every node of one job computes the same port without talking.
RDZV_PORT_BASE = 29400
RDZV_PORT_SPAN = 1000


def expand_nodelist(text: str) -> list[str]:
    """Expand SLURM's compressed host lists: `gpu[01-03,07],login1` -> gpu01 gpu02 gpu03 gpu07 login1.

    Handles zero padding, several bracket groups (`r[1-2]n[1-2]`) and commas inside brackets.
    Indices are ASCII digits; a list of more than MAX_NODES hosts is refused before it is
    expanded.
    """
    items = [item for item in _split_top_level(text.strip()) if item]
    total = 0
    for item in items:
        total += _count_item(item)
        if total > MAX_NODES:
            raise UserError(
                f"SLURM node list {quoted(text)} names more than {MAX_NODES} nodes; "
                "no cluster is that large"
            )
    hosts = [host for item in items for host in _expand_item(item)]
    if not hosts:
        raise UserError(f"empty SLURM node list {quoted(text)}")
    return hosts


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise UserError(f"malformed SLURM node list {quoted(text)}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise UserError(f"malformed SLURM node list {quoted(text)}: unbalanced '['")
    parts.append("".join(current))
    return parts


_GROUP = re.compile(r"\[([^\]]*)\]")
# Longer indices than any host name uses; int() of thousands of digits would raise.
_MAX_INDEX_DIGITS = 9


def _ranges(group: str, item: str) -> list[tuple[int, int, int]]:
    """`01-03,07` -> [(1, 3, 2), (7, 7, 2)]: (first, last, zero-padded width)."""
    out = []
    for rng in group.split(","):
        lo, sep, hi = rng.partition("-")
        ok = is_digits(lo) and (not sep or is_digits(hi))
        if not ok or max(len(lo), len(hi)) > _MAX_INDEX_DIGITS or (sep and int(hi) < int(lo)):
            raise UserError(f"malformed SLURM node range {quoted(rng)} in {quoted(item)}")
        out.append((int(lo), int(hi if sep else lo), len(lo)))
    return out


def _count_item(item: str) -> int:
    """How many hosts `item` expands to, without expanding it."""
    count = 1
    for group in _GROUP.findall(item):
        count *= sum(last - first + 1 for first, last, _ in _ranges(group, item))
        if count > MAX_NODES:
            break
    return count


def _expand_item(item: str) -> list[str]:
    match = _GROUP.search(item)
    if not match:
        return [item]
    prefix, suffix = item[: match.start()], item[match.end() :]
    out: list[str] = []
    for first, last, width in _ranges(match.group(1), item):
        for i in range(first, last + 1):
            out.extend(_expand_item(f"{prefix}{i:0{width}d}{suffix}"))
    return out


@dataclass(frozen=True, slots=True)
class SlurmJob:
    job_id: str
    nnodes: int
    node_rank: int
    nodes: list[str]
    tasks_per_node: int
    gpus_on_node: int | None

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def rdzv_endpoint(self) -> str:
        # the last digits are enough for the port (and int() of thousands of digits raises)
        digits = int(re.sub(r"[^0-9]", "", self.job_id)[-9:] or 0)
        return f"{self.head}:{RDZV_PORT_BASE + digits % RDZV_PORT_SPAN}"


def from_env(environ: dict[str, str]) -> SlurmJob | None:
    """The job this process runs in, or None outside SLURM (or in a plain `salloc` shell,
    where no step has started: there SLURM_NODEID is unset and srun is needed)."""
    if "SLURM_JOB_ID" not in environ or "SLURM_NODEID" not in environ:
        return None
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise UserError("SLURM_JOB_NODELIST is not set: cannot find the job's head node")
    nodes = expand_nodelist(nodelist)
    count = environ.get("SLURM_NNODES") or environ.get("SLURM_JOB_NUM_NODES")
    nnodes = _env_int("SLURM_NNODES", count, 1, MAX_NODES) if count else len(nodes)
    node_rank = _env_int("SLURM_NODEID", environ["SLURM_NODEID"], 0, MAX_NODES - 1)
    tasks = environ.get("SLURM_NTASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE") or "1"
    # SLURM_TASKS_PER_NODE looks like "2(x3),1": this node's count is what matters; take the first
    first = re.match(r"[0-9]{1,9}", tasks)
    gpus = environ.get("SLURM_GPUS_ON_NODE")
    return SlurmJob(
        job_id=environ["SLURM_JOB_ID"],
        nnodes=nnodes,
        node_rank=node_rank,
        nodes=nodes,
        tasks_per_node=int(first.group(0)) if first else 1,
        gpus_on_node=int(gpus) if gpus and is_digits(gpus) and len(gpus) < 6 else None,
    )


def _env_int(name: str, value: str, minimum: int, maximum: int) -> int:
    try:
        return parse_int(value, name, minimum=minimum, maximum=maximum)
    except UserError as exc:
        raise UserError(f"malformed SLURM environment: {exc}") from None


MAX_TIME_DAYS = 365
"""The longest --time taken: SLURM's own limit is "INFINITE"; past a year it is a typo."""
UNLIMITED = ("INFINITE", "UNLIMITED")
_TIME_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (or INFINITE)"
_N = "[0-9]{1,9}"
TIME_GRAMMAR = re.compile(
    rf"(?P<days>{_N})-(?P<dh>{_N})(?::(?P<dm>{_N})(?::(?P<ds>{_N}))?)?"
    rf"|(?P<first>{_N})(?::(?P<second>{_N})(?::(?P<third>{_N}))?)?"
    rf"|{'|'.join(UNLIMITED)}",
    re.ASCII | re.IGNORECASE,
)
"""sbatch's --time, matched whole (man sbatch): "minutes", "minutes:seconds",
"hours:minutes:seconds", "days-hours", "days-hours:minutes", "days-hours:minutes:seconds",
INFINITE or UNLIMITED in any case (ASCII case: U+0131, a dotless i, is no i to sbatch);
ASCII digits, no sign, no blank. Nothing is stripped: what is checked is what is written."""
_COUNT = re.compile(r"[0-9]{1,9}")
CONSTRAINT = re.compile(
    r"[A-Za-z0-9_.:-]+(?:\*[0-9]{1,9})?(?:[&|,][A-Za-z0-9_.:-]+(?:\*[0-9]{1,9})?)*"
)
"""sbatch's --constraint without its brackets and parentheses: node features (letters,
digits, `_`, `.`, `:`, `-`), each with an optional count (`*2`), joined by `&` (and), `|`
(or) or `,`: `a100&ib`, `rack1|rack2`. No blank, quote or `#`, which sbatch's reading of
the line would take otherwise, and nothing a shell reads: the line is never a command."""


def parse_time(text: str) -> int | None:
    """A SLURM time limit (sbatch --time, `TIME_GRAMMAR`) in minutes, rounded up; None for
    no limit. A field after the first is below 60 (hours after days below 24), and the whole
    is at most MAX_TIME_DAYS; anything else is UserError naming the field."""
    if not isinstance(text, str):
        raise UserError(f"--time must be text ({_TIME_FORMS}), got {text!r}")
    match = TIME_GRAMMAR.fullmatch(text)
    if match is None:
        raise UserError(f"--time {quoted(text)} is not a SLURM time ({_TIME_FORMS})")
    if text.upper() in UNLIMITED:
        return None
    got = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "days" in got:
        days, hours, minutes, seconds = got["days"], got["dh"], got.get("dm", 0), got.get("ds", 0)
        limits = [("hours", hours, 24), ("minutes", minutes, 60), ("seconds", seconds, 60)]
    elif "third" in got:
        days, hours, minutes, seconds = 0, got["first"], got["second"], got["third"]
        limits = [("minutes", minutes, 60), ("seconds", seconds, 60)]
    else:
        days, hours, minutes, seconds = 0, 0, got["first"], got.get("second", 0)
        limits = [("seconds", seconds, 60)] if "second" in got else []
    for name, value, below in limits:
        if value >= below:
            raise UserError(f"--time {quoted(text)}: {name} must be below {below}, got {value}")
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total > MAX_TIME_DAYS * 86400:
        raise UserError(f"--time {quoted(text)} is more than {MAX_TIME_DAYS} days")
    return -(-total // 60)


def sbatch_script(
    *,
    nodes: int,
    gpus_per_node: int,
    args: list[str],
    job_name: str = "commbench",
    time_limit: str = "00:30:00",
    partition: str | None = None,
    account: str | None = None,
    qos: str | None = None,
    constraint: str | None = None,
    venv: str | None = None,
) -> str:
    """A ready sbatch script: one commbench task per node, all GPUs of the node to it. Every
    value of an #SBATCH line matches sbatch's own grammar for it (`escape.sbatch_directive`),
    and the command line quotes every argument (`escape.shell_words`); UserError otherwise.
    `venv`: a virtual environment the script activates, so that `commbench` is the one
    installed there; without it the nodes find it on the PATH sbatch passes on from the
    submitting shell, and the script stops in one line where they do not. The script ends
    in a newline."""
    from commbench.escape import sbatch_directive, shell_words
    from commbench.launch.job import PLAIN_NAME

    lines = [
        "#!/bin/bash",
        sbatch_directive("job-name", job_name, PLAIN_NAME),
        sbatch_directive("nodes", nodes, _COUNT),
        "#SBATCH --ntasks-per-node=1",
        sbatch_directive("gpus-per-node", gpus_per_node, _COUNT)
        if gpus_per_node
        else "# (no GPUs requested: CPU/gloo run)",
        sbatch_directive("time", time_limit, TIME_GRAMMAR),
        "#SBATCH --output=%x-%j.out",
        # A benchmark wants the nodes to itself (no neighbour's traffic in the numbers), and
        # its one task per node runs a worker per GPU plus the torchrun agent: every CPU and
        # all memory, not the one CPU a task gets by default.
        "#SBATCH --exclusive",
        "#SBATCH --mem=0",
    ]
    for option, value, grammar in (
        ("partition", partition, PLAIN_NAME),
        ("account", account, PLAIN_NAME),
        ("qos", qos, PLAIN_NAME),
        ("constraint", constraint, CONSTRAINT),
    ):
        if value is not None:
            lines.append(sbatch_directive(option, value, grammar))
    command = shell_words(args, "the wrapped command's argument")
    lines += [
        "",
        "# commbench reads the SLURM environment (node list, node id) and builds the torchrun",
        "# rendezvous on the first node itself; each node starts one worker per GPU.",
        "# Uncomment to pin the network interfaces NCCL/gloo use:",
        "# export NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0",
    ]
    if venv is not None:
        activate = shell_words([f"{venv.rstrip('/')}/bin/activate"], "--venv")
        lines += ["# commbench as installed in this virtual environment (slurm-script --venv):"]
        lines += [f"source {activate}"]
    else:
        lines += [
            "# commbench must be on the nodes' PATH: sbatch passes on the environment it is",
            "# run from (its virtual environment activated), or slurm-script --venv DIR",
            "# activates DIR here.",
        ]
    lines += [
        "set -euo pipefail",
        'command -v commbench >/dev/null || { echo "commbench is not on PATH on $(hostname):'
        " activate its virtual environment before sbatch, or write this script with"
        ' slurm-script --venv DIR" >&2; exit 2; }',
        f"srun --ntasks-per-node=1 --cpu-bind=none commbench {command}",
    ]
    return "\n".join(lines) + "\n"


def check_constraint(constraint: str | None) -> None:
    """`--constraint`: node features joined by `&`, `|` or `,` (`CONSTRAINT`)."""
    from commbench.escape import unsafe_character

    if constraint is None:
        return
    if unsafe_character(constraint) is not None or not CONSTRAINT.fullmatch(constraint):
        raise UserError(
            f"--constraint {quoted(constraint)}: node features (letters, digits, '_', '.', ':', "
            "'-', each with an optional *COUNT) joined by '&', '|' or ','"
        )


def check_venv(venv: str | None) -> str | None:
    """`--venv DIR` as the absolute path the script activates (a relative one is taken from
    here, the directory sbatch runs the script in by default). It must hold `bin/activate`
    on this host: on the nodes it is the same path of a shared filesystem, and a typo found
    here is not found after the job waited in the queue."""
    import os

    from commbench.escape import refuse_unsafe

    if venv is None:
        return None
    refuse_unsafe("--venv", venv)
    path = os.path.normpath(os.path.abspath(venv))
    if not os.path.isfile(os.path.join(path, "bin", "activate")):
        raise UserError(
            f"--venv {quoted(venv)}: no virtual environment there (no bin/activate in {path}); "
            "give the one commbench is installed in, on a filesystem the nodes share"
        )
    return path
