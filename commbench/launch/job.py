"""One multi-node run of commbench as a scheduler is asked for it: how many nodes, how many
GPUs each, the commbench command every node runs, and the job's name.

`slurm-script` and `k8s-manifest` write the same job for two schedulers; what they share is
here, checked once: the node and GPU counts, the name rules of each scheduler, and the
wording of the errors about the wrapped command (which is parsed by the command line's own
grammar, in `commbench.cli._job`, since the launch layer cannot reach the command line).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from commbench.collectives.settings import MAX_NODES
from commbench.errors import UserError, quoted
from commbench.numbers import check_range
from commbench.options import flag

if TYPE_CHECKING:
    from commbench.collectives.placement import Placement

MAX_GPUS_PER_NODE = 64
"""GPUs one node of a job asks for at most (an HGX node has 8, the densest have 16 to 72
across several nodes): more is a typo that would sit in the queue forever."""

NODES = flag("--nodes", "-N", type=int, minimum=1, maximum=MAX_NODES)
"""The job's node count, declared once for `slurm-script` and `k8s-manifest`."""
GPUS_PER_NODE = flag("--gpus-per-node", type=int)
"""The GPUs each node of the job asks for (0 for a CPU/gloo run), declared once for both."""

WRAPPABLE = ("collectives", "run", "diagnose")
"""The commands that run across the nodes of a job (the others run on one machine)."""

LAUNCH_FLAGS = ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_id")
"""The wrapped command's options the job sets itself, from the scheduler."""

PLAIN_NAME = re.compile(r"[A-Za-z0-9_.,-]+")
"""A SLURM name (job, partition), matched whole: ASCII digits (`\\d` takes any Unicode
digit, which sbatch refuses once the job is submitted), nothing sbatch or a shell reads."""
# RFC 1123 label, as Kubernetes checks it (IsDNS1123Label): a namespace, a pod's host name
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# RFC 1035 label (IsDNS1035Label): a Service's name, hence the job's, which names its Service
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# RFC 1123 subdomain (IsDNS1123Subdomain): most object names, a PersistentVolumeClaim's
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253


def check_plain_name(flag: str, value: str | None) -> None:
    """A SLURM name (job, partition): letters, digits, '_', '-', '.', ','."""
    if value is not None and not (isinstance(value, str) and PLAIN_NAME.fullmatch(value)):
        raise UserError(
            f"{flag} {value!r}: use letters, digits, '_', '-', '.' (and ',' for partitions)"
        )


def check_dns_label(flag: str, value: str, *, rfc: int = 1123) -> None:
    """A Kubernetes DNS label (RFC 1123: a namespace; RFC 1035, which also starts with a
    letter: a Service): at most 63 lowercase letters, digits and '-', alphanumeric at
    both ends."""
    pattern, first = (
        (_DNS1035_LABEL, "a letter") if rfc == 1035 else (_DNS1123_LABEL, "a letter or digit")
    )
    if len(value) > DNS_LABEL_MAX or not pattern.fullmatch(value):
        raise UserError(
            f"{flag} {quoted(value)}: Kubernetes takes at most {DNS_LABEL_MAX} lowercase "
            f"letters, digits and '-', starting with {first} and ending with a letter or digit"
        )


def check_dns_subdomain(flag: str, value: str) -> None:
    """A Kubernetes object name (RFC 1123 subdomain): DNS labels joined by '.', at most 253."""
    if len(value) > DNS_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(value):
        raise UserError(
            f"{flag} {quoted(value)}: Kubernetes takes at most {DNS_SUBDOMAIN_MAX} lowercase "
            "letters, digits, '-' and '.', alphanumeric at both ends of each '.'-part"
        )


@dataclass(frozen=True, slots=True)
class Scheduler:
    """Who is asked for the job, and how its errors speak of what it writes."""

    command: str
    """The commbench command that writes the job (`slurm-script`)."""
    writes: str
    """What it writes, as the errors name it (`the script`)."""
    rendezvous: str
    """Where the job's rendezvous comes from (`the SLURM job`)."""
    example: str
    """A command line that works, for the error about a command that does not wrap."""
    check_name: Callable[[str], None]
    """Raises UserError for a job name the scheduler refuses, naming the flag that gave it."""


SLURM = Scheduler(
    command="slurm-script",
    writes="the script",
    rendezvous="the SLURM job",
    example="commbench slurm-script -N 2 -- collectives --sizes 1K-1G",
    check_name=partial(check_plain_name, "--job-name"),
)

KUBERNETES = Scheduler(
    command="k8s-manifest",
    writes="the manifest",
    rendezvous="the Job's pods",
    example="commbench k8s-manifest -N 2 --image IMAGE -- collectives --sizes 1K-1G",
    check_name=partial(check_dns_label, "--name", rfc=1035),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class MultiNodeJob:
    """One commbench command run on every node of a job, one task per node: the task starts
    the node's workers itself (through torchrun), and the nodes meet at a c10d rendezvous on
    the first one. Built by `commbench.cli._job.multi_node_job`, which also parses `args`."""

    scheduler: Scheduler
    nodes: int
    gpus_per_node: int
    """GPUs asked for on each node; 0 for a CPU/gloo run."""
    name: str
    args: tuple[str, ...]
    """The commbench command every node runs (`("collectives", "--sizes", "1K-1G")`)."""
    given: Mapping[str, Any] = field(default_factory=dict)
    """The wrapped command's options, parsed as the nodes will parse them (`nproc`, `out`:
    what the job has to honour)."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise UserError("--nodes must be at least 1")
        check_range(self.nodes, "--nodes", 1, MAX_NODES)
        if self.gpus_per_node < 0:
            raise UserError("--gpus-per-node must be >= 0")
        check_range(self.gpus_per_node, "--gpus-per-node", 0, MAX_GPUS_PER_NODE)
        self.scheduler.check_name(self.name)

    # What a wrapped command's request checks itself against (`check_wrapped` of
    # `CollectivesRun`, `DiagnoseRun`, `SuiteRun`): the job's nodes, not this submit host.

    def place(
        self, device: str | None = None, nproc: int | None = None, backend: str | None = None
    ) -> Placement:
        """Ranks placed on one of the job's nodes (`placement_for` its GPUs)."""
        from commbench.collectives.placement import placement_for

        return placement_for(self.gpus_per_node, device, nproc, backend)

    def check_gpus(self, device: str, nproc: int) -> None:
        """GPU ranks need a GPU each on the node: the nodes would refuse it after the queue."""
        if device == "cuda" and nproc > self.gpus_per_node:
            from commbench.flags import NPROC_HINT

            raise UserError(
                f"--device cuda runs {nproc} GPU rank(s) per node, and {self.scheduler.writes} "
                f"asks for --gpus-per-node {self.gpus_per_node} ({NPROC_HINT})"
            )
