"""Running on Kubernetes: the manifest of a multi-node job, as an Indexed Job and a headless
Service, or as a JobSet.

One pod per node, each running commbench, which starts the node's per-GPU workers itself
through torchrun (as `srun --ntasks-per-node=1` does under SLURM). The pods meet at a c10d
rendezvous on pod 0: an Indexed Job names its pods `<job>-<index>` and, with `subdomain` set
to a headless Service that selects them, DNS resolves `<job>-0.<service>` to pod 0 (a
JobSet makes the Service itself and names its pods `<jobset>-<replicatedJob>-0-<index>`).
Each pod's node rank is its completion index (`JOB_COMPLETION_INDEX`, which Kubernetes
expands in the container's arguments).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from commbench.errors import UserError, quoted
from commbench.launch.job import (
    DNS_LABEL_MAX,
    MultiNodeJob,
    check_dns_label,
    check_dns_subdomain,
)

KINDS = ("job", "jobset")
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "node"
"""The name of the JobSet's one replicatedJob: its pods are `<name>-node-0-<index>`."""
INDEX_ENV = "JOB_COMPLETION_INDEX"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
WORKDIR = "/workspace"
RESULTS_DIR = "results"
"""Where the results volume is mounted, under WORKDIR: the wrapped commands' default --out
(`results`, `results/suites`) lands in it."""
CONTAINER = "commbench"
IMAGE_UID = 10001
"""The user (and its group) the repository's Dockerfile runs commbench as: the pods say it
in their securityContext, so that Kubernetes refuses to start one as root (runAsNonRoot)
and a results claim is made writable for it (fsGroup)."""

# The image reference grammar of the distribution project (reference/regexp.go), which
# docker, containerd and the kubelet parse an image with:
#   reference := name [ ":" tag ] [ "@" digest ]
#   name      := [domain "/"] path-component ["/" path-component]*
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?")
NAME_MAX = 255
"""The longest repository name (domain and path) the grammar takes."""
REFERENCE_MAX = NAME_MAX + 1 + 128 + 1 + 7 + 128
"""The longest reference: the longest name, tag and digest (sha512) together."""
DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}
"""The digests an image is pulled by, and their length in hex digits."""
_QUALIFIED = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
MAX_DEVICES = 1024
"""The most RDMA devices a pod asks for (`--rdma NAME=COUNT`): past any node's NICs."""


def parse_resource(text: str) -> tuple[str, int]:
    """`--rdma rdma/ib` or `rdma/ib=8`: an extended resource a device plugin advertises
    (`DOMAIN/NAME`, as Kubernetes checks it: a DNS subdomain, '/', a qualified name of at
    most 63 characters) and how many of it each pod asks for (1 if not said)."""
    from commbench.launch.job import DNS_SUBDOMAIN_MAX, check_dns_subdomain

    name, sep, count = text.partition("=")
    domain, slash, local = name.partition("/")
    usage = (
        f"--rdma {quoted(text)}: expected DOMAIN/NAME[=COUNT], the device plugin's resource "
        "(rdma/ib, rdma/hca_shared_devices_a, nvidia.com/...)"
    )
    if not slash or not domain or len(local) > 63 or not _QUALIFIED.fullmatch(local):
        raise UserError(usage)
    if len(domain) > DNS_SUBDOMAIN_MAX:
        raise UserError(usage)
    check_dns_subdomain("--rdma's domain", domain)
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        raise UserError(f"--rdma {quoted(text)}: kubernetes.io names no device plugin's resource")
    if not sep:
        return name, 1
    if not (count.isascii() and count.isdigit() and len(count) <= 4) or not (
        1 <= int(count) <= MAX_DEVICES
    ):
        raise UserError(f"--rdma {quoted(text)}: COUNT must be 1-{MAX_DEVICES}")
    return name, int(count)


def check_image(image: str) -> None:
    """An image reference (`[registry[:port]/]path[:tag][@digest]`) as the container runtime
    parses it: lowercase path components, a tag of at most 128 characters of [A-Za-z0-9_.-]
    not starting with '.' or '-', a digest `algorithm:hex`. UserError naming what is wrong."""
    if len(image) > REFERENCE_MAX:  # before the grammar, which backtracks on a long one
        raise UserError(f"--image {quoted(image)} is over {REFERENCE_MAX} characters")
    match = _REFERENCE.fullmatch(image)
    if match is None:
        raise UserError(
            f"--image {quoted(image)} is not an image reference: "
            "[registry[:port]/]path[:tag][@digest], the path in lowercase letters, digits and "
            "'.', '_', '-' between them, a tag of up to 128 of [A-Za-z0-9_.-] "
            "(not starting with '.' or '-'), a digest algorithm:hex"
        )
    name, _, digest = match.groups()
    if len(name) > NAME_MAX:
        raise UserError(f"--image {quoted(image)}: the name is over {NAME_MAX} characters")
    if digest is not None:
        algorithm, _, hex_digits = digest.partition(":")
        if DIGEST_HEX.get(algorithm) != len(hex_digits):
            known = ", ".join(f"{a} ({n} hex digits)" for a, n in DIGEST_HEX.items())
            raise UserError(f"--image {quoted(image)}: a digest is one of {known}")
        if hex_digits != hex_digits.lower():  # go-digest's encoding: [a-f0-9] only
            raise UserError(f"--image {quoted(image)}: a digest's hex digits are lowercase")
    port = re.match(rf"{_HOST}:([0-9]+)/", name)
    if port is not None and not 1 <= int(port.group(1)) <= 65535:
        raise UserError(f"--image {quoted(image)}: a registry's port is 1-65535")


def check_port(port: int) -> None:
    if not 0 < port < 65536:
        raise UserError(f"--port must be 1-65535, got {port}")


@dataclass(frozen=True, kw_only=True, slots=True)
class KubernetesJob:
    """A multi-node job and what Kubernetes needs beyond it; checked when built."""

    job: MultiNodeJob
    image: str
    kind: str = "job"
    """`job` (an Indexed Job and a headless Service) or `jobset` (a JobSet)."""
    namespace: str | None = None
    port: int = 29400
    """The rendezvous port on pod 0."""
    results_volume: str | None = None
    """A PersistentVolumeClaim's name; None: an emptyDir, gone with the pod."""
    rdma: str | None = None
    """An RDMA device resource each pod asks for (`rdma/ib`, `rdma/ib=8`): without one, a
    pod sees no InfiniBand device, and NCCL between nodes goes over TCP sockets."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UserError(f"--kind must be job or jobset, got {quoted(self.kind)}")
        check_image(self.image)
        if self.namespace is not None:
            check_dns_label("--namespace", self.namespace)
        check_port(self.port)
        if self.results_volume is not None:
            check_dns_subdomain("--results-volume", self.results_volume)
        if self.rdma is not None:
            parse_resource(self.rdma)
        longest = len(self.hostname(self.job.nodes - 1))
        if longest > DNS_LABEL_MAX:
            form = self.hostname(0).replace(self.job.name, "NAME", 1)[:-1] + "INDEX"
            raise UserError(
                f"--name {quoted(self.job.name)}: the pods' host names ({form}) would be up to "
                f"{longest} characters, over the {DNS_LABEL_MAX} of a DNS label; use a shorter name"
            )
        _check_out(self.job.given.get("out"))

    @property
    def service(self) -> str:
        """The headless Service the pods are the subdomain of (a JobSet's is its name)."""
        return self.job.name

    def hostname(self, index: int) -> str:
        """Pod `index`'s host name, as the Job (or the JobSet) sets it."""
        if self.kind == "jobset":
            return f"{self.job.name}-{REPLICATED_JOB}-0-{index}"
        return f"{self.job.name}-{index}"

    @property
    def endpoint(self) -> str:
        """The c10d rendezvous, on pod 0."""
        return f"{self.hostname(0)}.{self.service}:{self.port}"

    def pod_args(self) -> list[str]:
        """The arguments of `commbench` in every pod: the wrapped command under the
        multi-node flags, the node rank left for Kubernetes to fill in."""
        name, *rest = self.job.args
        launch = [
            "--nnodes", str(self.job.nodes),
            "--node-rank", f"$({INDEX_ENV})",
            "--rdzv-endpoint", self.endpoint,
            "--rdzv-id", self.job.name,
        ]  # fmt: skip
        given = self.job.given
        on_gpus = self.job.gpus_per_node > 0 and given.get("device") in (None, "cuda")
        if on_gpus and given.get("nproc") is None:
            launch += ["--nproc", str(self.job.gpus_per_node)]
        # Kubernetes expands $(VAR) in args: a user's `$` is written `$$`, so that the pod
        # runs what was checked here; only the node rank is left for it to fill in
        own = [arg.replace("$", "$$") for arg in rest]
        # right after the command's name: its own arguments may end in a positional one
        return [name, *launch, *own]


def _check_out(out: Any) -> None:
    """The wrapped command's --out must land on the results volume."""
    if out is None:
        return
    where = posixpath.normpath(posixpath.join(WORKDIR, str(out)))
    volume = posixpath.join(WORKDIR, RESULTS_DIR)
    if where != volume and not where.startswith(volume + "/"):
        raise UserError(
            f"--out {quoted(str(out))}: the pods write their results to the volume at "
            f"{volume} (their working directory is {WORKDIR}); keep --out under {RESULTS_DIR}/"
        )


def manifest(k8s: KubernetesJob) -> str:
    """The YAML to `kubectl apply -f`: a headless Service and an Indexed Job, or a JobSet.
    Written by `escape.yaml_documents`, which reads it back and refuses it unless it is
    exactly these documents, every string of the user's as given."""
    import shlex

    from commbench.escape import yaml_documents

    job = k8s.job
    documents = [_jobset(k8s)] if k8s.kind == "jobset" else [_service(k8s), _job(k8s)]
    gpus = f"{job.gpus_per_node} GPU(s)" if job.gpus_per_node else "no GPUs (CPU/gloo)"
    kept = (
        f"the PersistentVolumeClaim {k8s.results_volume}"
        if k8s.results_volume
        else "an emptyDir, gone with the pod (pass --results-volume CLAIM to keep them)"
    )
    header = [
        f"commbench {job.scheduler.command}: `commbench {shlex.join(job.args)}` on "
        f"{job.nodes} nodes, one pod each with {gpus}",
        f"Apply with `kubectl apply -f`. Results: {WORKDIR}/{RESULTS_DIR} in each pod, {kept}.",
    ]
    if job.nodes > 1 and job.gpus_per_node and k8s.rdma is None:
        header.append(
            "No RDMA device asked for: NCCL between pods goes over TCP sockets "
            "(on InfiniBand, pass --rdma RESOURCE, e.g. rdma/ib)."
        )
    return yaml_documents(documents, header)


def _metadata(k8s: KubernetesJob) -> dict[str, Any]:
    """An object's metadata: a fresh dict each time (YAML would write a shared one once,
    and an alias for the rest)."""
    metadata: dict[str, Any] = {"name": k8s.job.name}
    if k8s.namespace is not None:
        metadata["namespace"] = k8s.namespace
    metadata["labels"] = _labels(k8s.job.name)
    return metadata


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "commbench", "app.kubernetes.io/instance": name}


def _service(k8s: KubernetesJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(k8s),
        "spec": {
            "clusterIP": "None",
            # pod 0's name must resolve before it is Ready: the other pods look it up at once
            "publishNotReadyAddresses": True,
            "selector": _labels(k8s.job.name),
            "ports": [{"name": "rendezvous", "port": k8s.port, "targetPort": k8s.port}],
        },
    }


def _job(k8s: KubernetesJob) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(k8s),
        "spec": _job_spec(k8s, subdomain=k8s.service),
    }


def _jobset(k8s: KubernetesJob) -> dict[str, Any]:
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": _metadata(k8s),
        "spec": {
            # the JobSet makes a headless Service named after it, the pods its subdomain
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            # a benchmark that failed is reported, not run again over the half-done one
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": 1,
                    "template": {"spec": _job_spec(k8s, subdomain=None)},
                }
            ],
        },
    }


def _job_spec(k8s: KubernetesJob, *, subdomain: str | None) -> dict[str, Any]:
    """An Indexed Job of one pod per node, all started at once."""
    pod: dict[str, Any] = {}
    if subdomain is not None:
        pod["subdomain"] = subdomain
    pod["restartPolicy"] = "Never"
    # the image's user, said so that Kubernetes refuses to run the pod as root, and so that
    # a results claim is made writable for it (fsGroup)
    pod["securityContext"] = {
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        "runAsNonRoot": True,
        "fsGroup": IMAGE_UID,
    }
    pod["containers"] = [_container(k8s)]
    results: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": k8s.results_volume}}
        if k8s.results_volume
        else {"emptyDir": {}}
    )
    pod["volumes"] = [
        # NCCL's shared-memory transport wants more than a container's 64 MiB /dev/shm
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {"name": "results", **results},
    ]
    return {
        "completionMode": "Indexed",
        "completions": k8s.job.nodes,
        "parallelism": k8s.job.nodes,
        # a pod that failed is not started again: the others would wait for it at the
        # rendezvous of a run that is over
        "backoffLimit": 0,
        "template": {"metadata": {"labels": _labels(k8s.job.name)}, "spec": pod},
    }


def _container(k8s: KubernetesJob) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": k8s.image,
        "workingDir": WORKDIR,
        "command": ["commbench"],
        "args": k8s.pod_args(),
        "env": [
            # what the Job controller sets too, said here so the manifest reads on its own
            {
                "name": INDEX_ENV,
                "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}
                },
            }
        ],
        "ports": [{"name": "rendezvous", "containerPort": k8s.port}],
    }
    devices: dict[str, int] = {}
    if k8s.job.gpus_per_node:
        devices["nvidia.com/gpu"] = k8s.job.gpus_per_node
    if k8s.rdma is not None:
        # the InfiniBand device for NCCL's IB transport; pinning its buffers takes the
        # memlock limit the node's container runtime gives (docs/multinode.md)
        name, count = parse_resource(k8s.rdma)
        devices[name] = count
    if devices:
        container["resources"] = {"requests": dict(devices), "limits": dict(devices)}
    container["volumeMounts"] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "results", "mountPath": posixpath.join(WORKDIR, RESULTS_DIR)},
    ]
    return container
