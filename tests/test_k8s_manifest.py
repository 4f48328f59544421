"""`commbench k8s-manifest`: the manifest is what Kubernetes accepts (its own schemas, through
kubernetes-validate; JobSet's v1alpha2 API field by field), bad input is one line and exit 2,
and the pods' commands, run on two machines of their own (network namespaces whose
/etc/hosts resolve the pods' names as the cluster's DNS would), make one two-node run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from netns_cluster import Cluster
from typer.testing import CliRunner

import commbench
from commbench.cli import app
from commbench.errors import UserError
from commbench.launch.k8s import check_image

kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S_VERSION = "1.30"
IMAGE = "ghcr.io/acme/commbench:0.1"
CI_SUITE = str(Path(__file__).parent.parent / "configs" / "ci.yaml")


def manifest(*args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, ["k8s-manifest", *args])
    assert result.exit_code == 0, result.output
    return list(yaml.safe_load_all(result.stdout))


def validate(resource: dict[str, Any]) -> None:
    """Kubernetes' own schema of the resource's kind, unknown fields refused."""
    kubernetes_validate.validate(resource, K8S_VERSION, strict=True)


def container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod_spec["containers"]
    return only


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--namespace", "ml-bench", "--results-volume", "bench-results", "--port", "23456"],
        ["-N", "16", "--gpus-per-node", "4", "--name", "nightly-run"],
        ["--gpus-per-node", "0", "--", "collectives", "--device", "cpu", "--nproc", "1"],
        ["--", "run", CI_SUITE],
        ["--", "diagnose"],
    ],
)
def test_the_job_and_the_service_are_valid_kubernetes(extra: list[str]) -> None:
    docs = manifest("--image", IMAGE, *extra)
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    for doc in docs:
        validate(doc)


def test_an_indexed_job_whose_pods_meet_at_pod_0() -> None:
    service, job = manifest(
        "-N", "4", "--gpus-per-node", "8", "--image", IMAGE, "--name", "bench", "--port", "23456",
        "--", "collectives", "--sizes", "1K-1G", "--ops", "all_reduce",
    )  # fmt: skip
    assert service["spec"]["clusterIP"] == "None"
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    labels = spec["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()  # the Service selects the pods
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == "bench"
    main = container(pod)
    assert main["image"] == IMAGE and main["command"] == ["commbench"]
    args = main["args"]
    assert args[0] == "collectives" and args[-4:] == ["--sizes", "1K-1G", "--ops", "all_reduce"]
    assert flag(args, "--nnodes") == "4"
    assert flag(args, "--node-rank") == "$(JOB_COMPLETION_INDEX)"
    # pod 0 is `<job>-0`, and `<job>-0.<service>` its name in the cluster's DNS
    assert flag(args, "--rdzv-endpoint") == "bench-0.bench:23456"
    assert flag(args, "--nproc") == "8"
    (index,) = main["env"]
    assert index["name"] == "JOB_COMPLETION_INDEX"
    assert index["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    assert main["resources"] == {
        "requests": {"nvidia.com/gpu": 8},
        "limits": {"nvidia.com/gpu": 8},
    }
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"} and mounts["dshm"] == "/dev/shm"
    assert volumes["results"]["emptyDir"] == {}  # the default: gone with the pod
    assert mounts["results"] == main["workingDir"] + "/results"  # where --out results lands


def test_a_cpu_run_asks_for_no_gpus_and_keeps_its_own_nproc() -> None:
    _, job = manifest(
        "--gpus-per-node", "0", "--image", IMAGE, "--results-volume", "runs",
        "--", "collectives", "--device", "cpu", "--nproc", "1",
    )  # fmt: skip
    pod = job["spec"]["template"]["spec"]
    main = container(pod)
    assert "resources" not in main
    assert main["args"].count("--nproc") == 1 and flag(main["args"], "--nproc") == "1"
    results = next(v for v in pod["volumes"] if v["name"] == "results")
    assert results == {"name": "results", "persistentVolumeClaim": {"claimName": "runs"}}


def test_the_namespace_is_set_on_every_object() -> None:
    docs = manifest("--image", IMAGE, "--namespace", "team-a")
    assert [d["metadata"]["namespace"] for d in docs] == ["team-a", "team-a"]
    assert all("namespace" not in d["metadata"] for d in manifest("--image", IMAGE))


def test_the_pods_run_as_the_image_s_user_never_as_root() -> None:
    """The image runs as uid 10001 (Dockerfile's USER, `IMAGE_UID`): the pods say so, so
    that Kubernetes refuses to start one as root, and a results claim is writable for it."""
    from commbench.launch.k8s import IMAGE_UID

    for extra in ([], ["--kind", "jobset"]):
        job = manifest("--image", IMAGE, "--results-volume", "runs", *extra)[-1]
        spec = job["spec"]["replicatedJobs"][0]["template"]["spec"] if extra else job["spec"]
        context = spec["template"]["spec"]["securityContext"]
        assert context == {
            "runAsUser": IMAGE_UID,
            "runAsGroup": IMAGE_UID,
            "runAsNonRoot": True,
            "fsGroup": IMAGE_UID,
        }
        validate(job) if not extra else check_jobset(job)


@pytest.mark.parametrize(
    ("rdma", "asked"),
    [
        ("rdma/ib", {"rdma/ib": 1}),
        ("rdma/hca_shared_devices_a=8", {"rdma/hca_shared_devices_a": 8}),
    ],
)
def test_rdma_asks_each_pod_for_the_device_plugin_s_resource(
    rdma: str, asked: dict[str, int]
) -> None:
    """Without an RDMA device a pod has no InfiniBand, and NCCL between pods uses TCP
    sockets: the header says so, and `--rdma` asks for the device beside the GPUs."""
    plain = CliRunner().invoke(app, ["k8s-manifest", "--image", IMAGE]).stdout
    assert "No RDMA device asked for: NCCL between pods goes over TCP sockets" in plain
    result = CliRunner().invoke(app, ["k8s-manifest", "--image", IMAGE, "--rdma", rdma])
    assert result.exit_code == 0, result.output
    assert "No RDMA device" not in result.stdout
    _, job = yaml.safe_load_all(result.stdout)
    validate(job)
    resources = container(job["spec"]["template"]["spec"])["resources"]
    assert resources["limits"] == resources["requests"] == {"nvidia.com/gpu": 8, **asked}


@pytest.mark.parametrize(
    "rdma",
    ["ib", "rdma/", "/ib", "rdma/ib=0", "rdma/ib=x", "Rdma/ib", "kubernetes.io/ib", "a/b\nc: 1"],
)
def test_an_rdma_resource_kubernetes_would_refuse_is_refused(rdma: str) -> None:
    result = CliRunner().invoke(app, ["k8s-manifest", "--image", IMAGE, "--rdma", rdma])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "--rdma" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# JobSet is a custom resource: Kubernetes' schemas do not have it. Its v1alpha2 API
# (sigs.k8s.io/jobset api/jobset/v1alpha2/jobset_types.go), field by field; the Job template
# of each replicatedJob is a batch/v1 JobTemplateSpec, validated as a Job by Kubernetes' own.
JOBSET_FIELDS = {"apiVersion", "kind", "metadata", "spec"}
JOBSET_SPEC = {
    "replicatedJobs", "network", "successPolicy", "failurePolicy", "startupPolicy",
    "suspend", "coordinator", "managedBy", "ttlSecondsAfterFinished", "volumeClaimPolicies",
}  # fmt: skip
REPLICATED_JOB = {"name", "groupName", "template", "replicas", "dependsOn"}
NETWORK = {"enableDNSHostnames": bool, "subdomain": str, "publishNotReadyAddresses": bool}
FAILURE_POLICY = {"maxRestarts", "restartStrategy", "rules"}
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def check_jobset(doc: dict[str, Any]) -> None:
    assert set(doc) <= JOBSET_FIELDS
    assert (doc["apiVersion"], doc["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    spec = doc["spec"]
    assert set(spec) <= JOBSET_SPEC
    for key, value in spec.get("network", {}).items():
        assert isinstance(value, NETWORK[key]), key
    failure = spec.get("failurePolicy", {})
    assert set(failure) <= FAILURE_POLICY
    assert isinstance(failure.get("maxRestarts", 0), int) and failure.get("maxRestarts", 0) >= 0
    jobs = spec["replicatedJobs"]
    assert isinstance(jobs, list) and jobs
    assert len({j["name"] for j in jobs}) == len(jobs)  # a map keyed by name
    for rjob in jobs:
        assert set(rjob) <= REPLICATED_JOB and {"name", "template"} <= set(rjob)
        assert DNS1035.fullmatch(rjob["name"]) and len(rjob["name"]) <= 63
        assert isinstance(rjob.get("replicas", 1), int) and rjob.get("replicas", 1) >= 1
        template = rjob["template"]
        assert set(template) <= {"metadata", "spec"}
        # the JobTemplateSpec as the Job it makes, with the JobSet's metadata
        validate(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {**doc["metadata"], **template.get("metadata", {})},
                "spec": template["spec"],
            }
        )


def test_a_jobset_with_one_replicated_job() -> None:
    (doc,) = manifest(
        "-N", "3", "--gpus-per-node", "8", "--kind", "jobset", "--image", IMAGE,
        "--name", "bench", "--namespace", "ml", "--",
        "collectives", "--sizes", "1K-1M",
    )  # fmt: skip
    check_jobset(doc)
    (rjob,) = doc["spec"]["replicatedJobs"]
    assert rjob["replicas"] == 1
    spec = rjob["template"]["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert doc["spec"]["network"]["enableDNSHostnames"] is True
    main = container(spec["template"]["spec"])
    # the JobSet's pods are `<jobset>-<replicatedJob>-<job index>-<pod index>.<jobset>`
    assert flag(main["args"], "--rdzv-endpoint") == "bench-node-0-0.bench:29400"
    assert flag(main["args"], "--node-rank") == "$(JOB_COMPLETION_INDEX)"
    assert main["resources"]["limits"] == {"nvidia.com/gpu": 8}


def test_the_structural_check_of_a_jobset_can_fail() -> None:
    (doc,) = manifest("--kind", "jobset", "--image", IMAGE)
    doc["spec"]["replicatedJobs"][0]["replica"] = 2  # a typo of `replicas`
    with pytest.raises(AssertionError):
        check_jobset(doc)
    (doc,) = manifest("--kind", "jobset", "--image", IMAGE)
    doc["spec"]["replicatedJobs"][0]["template"]["spec"]["completion"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        check_jobset(doc)


def test_the_verb_returns_what_the_command_prints() -> None:
    args = ["-N", "2", "--image", IMAGE, "--kind", "jobset", "--", "collectives", "--sizes", "1K"]
    printed = CliRunner().invoke(app, ["k8s-manifest", *args]).stdout
    text = commbench.k8s_manifest(
        ["collectives", "--sizes", "1K"], nodes=2, image=IMAGE, kind="jobset"
    )
    assert text == printed
    with pytest.raises(UserError, match="--port"):
        commbench.k8s_manifest(image=IMAGE, port=0)


@pytest.mark.parametrize(
    "image",
    [
        "commbench",
        "acme/commbench:0.1",
        "ghcr.io/acme/commbench:v1.2.3-rc_1",
        "localhost:5000/commbench",
        "registry.example.com:443/team/sub/commbench:latest",
        "[::1]:5000/commbench:x",
        "a__b/c.d-e---f",
        "commbench@sha256:" + "a" * 64,
        "commbench:1.0@sha512:" + "f" * 128,
        "commbench:" + "T" * 128,
    ],
)
def test_image_references_the_runtime_pulls(image: str) -> None:
    check_image(image)


@pytest.mark.parametrize(
    "image",
    [
        "",
        "Commbench",  # uppercase path
        "acme/Commbench:1",
        "commbench:",
        "commbench:.hidden",
        "commbench:-x",
        "commbench:" + "t" * 129,
        "commbench:a/b",
        "commbench@sha256:abc",
        "commbench@sha256:" + "g" * 64,
        "commbench@md5:" + "a" * 32,  # not a digest images are pulled by
        "commbench@sha256" + "a" * 64,
        "acme//commbench",
        "acme/commbench/",
        "-acme.io/commbench",
        "acme/commbench_",
        "acme/comm___bench",
        "comm bench",
        "a" * 256,
        "a" + "/a" * 2000,
    ],
)
def test_image_references_that_are_not_refused(image: str) -> None:
    with pytest.raises(UserError, match="--image"):
        check_image(image)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--image", IMAGE, "-N", "0"], "--nodes must be >= 1"),
        (["--image", IMAGE, "-N", "1000000"], "--nodes must be <="),
        (["--image", IMAGE, "--gpus-per-node", "65"], "--gpus-per-node"),
        (["--image", IMAGE, "--gpus-per-node", "-1"], "--gpus-per-node must be >= 0"),
        (["--image", IMAGE, "--name", "Bench"], "--name 'Bench': Kubernetes takes"),
        (["--image", IMAGE, "--name", "1bench"], "starting with a letter"),  # a Service name
        (["--image", IMAGE, "--name", "bench-"], "--name 'bench-'"),
        (["--image", IMAGE, "--name", "a.b"], "--name 'a.b'"),
        (["--image", IMAGE, "--name", "b" * 64], "at most 63"),
        # the pods' host names, `<name>-<index>`, are DNS labels too
        (["--image", IMAGE, "-N", "100", "--name", "b" * 61], "(NAME-INDEX) would be up to 64"),
        (
            ["--image", IMAGE, "--kind", "jobset", "--name", "b" * 55],
            "(NAME-node-0-INDEX) would be up to 64",
        ),
        (["--image", IMAGE, "--namespace", "Team"], "--namespace 'Team'"),
        (["--image", IMAGE, "--namespace", "n" * 64], "--namespace"),
        (["--image", IMAGE, "--results-volume", "Runs"], "--results-volume 'Runs'"),
        (["--image", "acme/Commbench"], "is not an image reference"),
        (["--image", "acme:tag:tag"], "is not an image reference"),
        (["--image", IMAGE, "--port", "0"], "--port must be 1-65535, got 0"),
        (["--image", IMAGE, "--port", "65536"], "--port must be 1-65535, got 65536"),
        (["--image", IMAGE, "--kind", "deployment"], "--kind must be job or jobset"),
        (["-N", "2"], "Missing option '--image'"),
        # what slurm-script refuses in the wrapped command, refused here too
        (["--image", IMAGE, "--", "collectives", "--sizes", "1X"], "unknown unit 'X'"),
        (["--image", IMAGE, "--", "collectives", "--bogus"], "No such option: --bogus"),
        (
            ["--image", IMAGE, "--", "compare", "a", "b"],
            "k8s-manifest runs collectives, run or diagnose on every node, not 'compare'",
        ),
        (["--image", IMAGE, "--", "run", "missing.yaml"], "missing.yaml: no such suite file"),
        (
            ["--image", IMAGE, "--", "collectives", "--node-rank", "1", "--nnodes", "2"],
            "--nnodes, --node-rank: the manifest builds the rendezvous from the Job's pods",
        ),
        (
            ["--image", IMAGE, "--gpus-per-node", "0", "--", "collectives", "--backend", "nccl"],
            "needs GPUs, and the manifest asks for --gpus-per-node 0",
        ),
        (
            ["--image", IMAGE, "--gpus-per-node", "2", "--", "collectives", "--nproc", "4"],
            "runs 4 GPU rank(s) per node, and the manifest asks for --gpus-per-node 2",
        ),
        (["--image", IMAGE, "--", "collectives", "--iters", "5", "--min-time", "1"], "--iters"),
        # the results go to the volume: an --out elsewhere would be lost with the pod
        (["--image", IMAGE, "--", "collectives", "-o", "/tmp/runs"], "keep --out under results/"),
        (["--image", IMAGE, "--", "collectives", "-o", "results/../x"], "--out"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    result = CliRunner().invoke(app, ["k8s-manifest", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert fragment in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 or "Usage:" in result.stderr


# --- the pods' commands, run on two machines -------------------------------------------------

POD_COMMAND = [
    "--gpus-per-node", "0", "--", "collectives", "--device", "cpu", "--nproc", "1",
    "--sizes", "1K-4K", "--ops", "all_reduce", "--iters", "3", "--warmup", "1",
    "--timeout", "60",
]  # fmt: skip


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` in a container's command and arguments: a variable the container
    defines is replaced; `$$` is a `$`; anything else is left as it is."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


def pod_env(main: dict[str, Any], index: int) -> dict[str, str]:
    """The container's variables, as the Job controller fills them in for pod `index`."""
    annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
    env = {}
    for var in main["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        path = var["valueFrom"]["fieldRef"]["fieldPath"]
        key = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", path)
        assert key is not None, path
        env[var["name"]] = annotations[key.group(1)]
    return env


@pytest.mark.integration
@pytest.mark.netns
def test_the_pods_commands_make_one_two_node_run(tmp_path: Path, free_port: int) -> None:
    """Each namespace is a pod: its host name `<job>-<index>`, and its /etc/hosts resolves
    the names the cluster's DNS would (`<job>-<index>.<service>` and the full name in the
    `default` namespace) to the pods' addresses. The manifest's command, its `$(...)`
    expanded as Kubernetes expands it, runs in each; node 0's run holds the rows of a world
    of two."""
    cluster = Cluster(2, prefix="k8s")
    job = cluster.tag  # unique to this run, and a DNS-1035 label (it starts with a letter)
    pods = [f"{job}-{i}" for i in range(2)]
    cluster.hosts = pods  # the pods' host names, as the Indexed Job sets them
    service, spec = manifest(
        "-N", "2", "--image", IMAGE, "--name", job, "--port", str(free_port), *POD_COMMAND
    )
    service_name = service["metadata"]["name"]
    pod_spec = spec["spec"]["template"]["spec"]
    main = container(pod_spec)
    endpoint_host = flag(main["args"], "--rdzv-endpoint").rpartition(":")[0]
    assert endpoint_host == f"{pods[0]}.{service_name}"
    package_root = str(Path(commbench.__file__).parent.parent)
    with cluster:
        names = {}
        for i, pod in enumerate(pods):
            names[f"{pod}.{service_name}"] = cluster.addresses[i]
            names[f"{pod}.{service_name}.default.svc.cluster.local"] = cluster.addresses[i]
        for i in range(2):
            cluster.map_host(i, names)
        procs = []
        for i in range(2):
            env = pod_env(main, i)
            argv = [expand(word, env) for word in [*main["command"], *main["args"]]]
            assert argv[0] == "commbench"
            workdir = tmp_path / pods[i]  # the pod's workingDir
            (workdir / "results").mkdir(parents=True)  # the results volume's mount
            python_path = os.pathsep.join(
                p for p in (package_root, os.environ.get("PYTHONPATH")) if p
            )
            procs.append(
                cluster.popen(
                    i,
                    [sys.executable, "-m", "commbench", *argv[1:]],
                    env={**env, "PYTHONPATH": python_path},
                    cwd=workdir,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=240) for p in procs]
    assert not cluster.cleanup_problems, cluster.cleanup_problems
    assert [p.returncode for p in procs] == [0, 0], outputs
    from commbench.results.runs import load_run

    (run_dir,) = (tmp_path / pods[0] / "results").iterdir()
    run = load_run(run_dir)
    assert [(row.op, row.world_size, row.check) for row in run.rows] == [
        ("all_reduce", 2, "ok")
    ] * 3  # 1K, 2K, 4K
    assert run.context.hosts == pods  # two machines, each a pod by its host name
    (other,) = (tmp_path / pods[1] / "results").iterdir()
    assert not (other / "results.csv").exists()  # one run: node 0 wrote the rows


@pytest.mark.parametrize("command", ["k8s-manifest", "slurm-script"])
@pytest.mark.parametrize(
    ("wrapped", "said"),
    [
        # a line break would end the header comment and start YAML of the user's own
        (
            ["collectives", "--out", "results/x\n---\nkind: Pod\nmetadata: {name: evil}"],
            "argument 2 holds U+000A LINE FEED, a line break",
        ),
        (["collectives", "--sizes", "1K\r"], "argument 2 holds U+000D CARRIAGE RETURN"),
        # what YAML, and not only \n, reads as a line break
        *(
            (
                ["collectives", "--out", f"results/x{sep}---{sep}kind: Pod"],
                f"argument 2 holds U+{ord(sep):04X}",
            )
            for sep in "\x85\u2028\u2029"
        ),
        (["collectives", "--help"], "the wrapped command asks for its help"),
        (["diagnose", "-h"], "the wrapped command asks for its help"),
    ],
)
def test_a_wrapped_command_that_would_not_run_as_written_is_refused(
    command: str, wrapped: list[str], said: str
) -> None:
    extra = ["--image", IMAGE] if command == "k8s-manifest" else []
    result = CliRunner().invoke(app, [command, *extra, "--", *wrapped])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert said in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_dollar_of_the_user_reaches_the_pod_as_typed() -> None:
    """Kubernetes expands $(VAR) in a container's args and turns $$ into $: the user's `$`
    is written `$$`, and only the node rank is left for Kubernetes to fill in."""
    out = "results/$(JOB_COMPLETION_INDEX)/$$(HOME)"
    docs = manifest("--image", IMAGE, "--gpus-per-node", "0", "--", "collectives", "--out", out)
    args = container(docs[1]["spec"]["template"]["spec"])["args"]
    assert flag(args, "--out") == "results/$$(JOB_COMPLETION_INDEX)/$$$$(HOME)"
    assert flag(args, "--node-rank") == "$(JOB_COMPLETION_INDEX)"
    # what the kubelet gives the process: $$ -> $, and no $(VAR) of the user expanded
    expanded = re.sub(
        r"\$\$|\$\(([A-Z_]+)\)", lambda m: "$" if m.group(0) == "$$" else "0", flag(args, "--out")
    )
    assert expanded == out


@pytest.mark.parametrize(
    ("image", "said"),
    [
        ("registry.local:0/bench:1", "a registry's port is 1-65535"),
        ("registry.local:99999/bench:1", "a registry's port is 1-65535"),
        ("bench@sha256:" + "AB" * 32, "a digest's hex digits are lowercase"),
    ],
)
def test_an_image_the_runtime_would_not_pull_is_refused(image: str, said: str) -> None:
    with pytest.raises(UserError, match=said):
        check_image(image)
    check_image("registry.local:5000/bench@sha256:" + "ab" * 32)  # the same, pullable
