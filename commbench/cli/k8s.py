"""`commbench k8s-manifest`: print the Kubernetes manifest of a multi-node run."""

from __future__ import annotations

from dataclasses import dataclass, field

import typer

from commbench.cli._job import JobRequest, register_job_command
from commbench.options import cli, option, verb


@dataclass(kw_only=True)
class K8sManifestRequest(JobRequest):
    """Every option of `commbench k8s-manifest` and `k8s_manifest`, declared once."""

    image: str = field(
        metadata=cli(metavar="IMAGE", help="Container image with commbench installed.")
    )
    kind: str = option(
        default="job",
        metavar="job|jobset",
        help="job: an Indexed Job and a headless Service; jobset: a JobSet "
        "(jobset.x-k8s.io/v1alpha2).",
    )
    namespace: str | None = option(help="Namespace. Default: kubectl's current one.")
    name: str = option(default="commbench", help="Job (and Service) name.")
    port: int = option(default=29400, help="Rendezvous port on the first pod.")
    results_volume: str | None = option(
        metavar="CLAIM",
        help="PersistentVolumeClaim for the results (/workspace/results; ReadWriteMany "
        "for several nodes). Default: an emptyDir, deleted with the pod.",
    )
    rdma: str | None = option(
        metavar="RESOURCE[=COUNT]",
        help="RDMA devices per pod, as the cluster's device plugin names them (rdma/ib, "
        "rdma/hca_shared_devices_a): without, NCCL between pods uses TCP sockets.",
    )


@verb(K8sManifestRequest)
def k8s_manifest(request: K8sManifestRequest) -> str:
    """The Kubernetes manifest (YAML) of a run of the commbench `command` (its arguments as
    a list, e.g. `["collectives", "--sizes", "1K-1G"]`) on `nodes` pods (`commbench
    k8s-manifest`): an Indexed Job and a headless Service, or a JobSet. The command is
    parsed here as the pods will parse it, by the command line's own grammar, as
    `slurm_script` parses it. UserError for bad input."""
    from commbench.cli._job import multi_node_job
    from commbench.fields import pick
    from commbench.launch.job import KUBERNETES
    from commbench.launch.k8s import KubernetesJob, manifest

    job = multi_node_job(KUBERNETES, request, name=request.name)
    return manifest(
        KubernetesJob(
            job=job,
            **pick(request, "image", "kind", "namespace", "port", "results_volume", "rdma"),
        )
    )


HELP = """Print a Kubernetes manifest that runs commbench on every node: one pod per node.

Everything after the options is the commbench command to run, e.g.
`commbench k8s-manifest -N 4 --image IMAGE -- collectives --sizes 1K-1G`.
"""
"""The command's help (`--help`, docs/cli.md)."""


def register(app: typer.Typer) -> None:
    register_job_command(app, "k8s-manifest", K8sManifestRequest, k8s_manifest, HELP)
