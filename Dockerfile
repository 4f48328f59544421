# commbench in a container: the image `commbench k8s-manifest --image` runs on every pod
# (docs/multinode.md, "A container image"). Build it from the repository's root:
#   docker build -t REGISTRY/commbench:0.1 .
#
# The base is PyTorch's official CUDA runtime image: torch built for CUDA 12.8 with its own
# NCCL, which commbench measures as it is (pip keeps a torch that meets commbench's
# torch>=2.5, so it installs no other). CUDA 12.8 needs an NVIDIA driver >= 525 on the
# nodes (docs/development.md, "Which torch for which driver").
FROM pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime

# ibverbs (rdma-core's libibverbs and its NIC drivers): NCCL's InfiniBand/RoCE transport
# loads libibverbs.so.1, and without it NCCL between nodes falls back to TCP sockets. The
# pods also need the RDMA device itself (`k8s-manifest --rdma rdma/ib`).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libibverbs1 ibverbs-providers \
    && rm -rf /var/lib/apt/lists/*

# A virtual environment over the image's Python: a base whose Python is marked
# externally managed (PEP 668) refuses a plain `pip install`, and a venv is never marked.
# --system-site-packages keeps the image's torch (and its NCCL) visible, so pip installs
# no other. Its bin/ comes first on PATH: `commbench` is the venv's.
RUN python -m venv --system-site-packages /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# Installed as the README installs it, without the dev extra: the package and what
# pyproject.toml names (README.md is its long description)
WORKDIR /src
COPY pyproject.toml README.md ./
COPY commbench ./commbench
RUN /opt/venv/bin/python -m pip install --no-cache-dir .

# Not root: a benchmark needs no privilege in the pod. A uid no base image gives another
# user (Ubuntu 24.04's own user is 1000), and numeric, so that Kubernetes' runAsNonRoot can
# check it; the manifest's pods run as it (`launch.k8s.IMAGE_UID`). The manifest's pods work
# in /workspace, the results volume at /workspace/results (an emptyDir anyone may write; a
# claim is made writable for the uid by the pods' fsGroup).
WORKDIR /workspace
RUN rm -rf /src \
    && groupadd --gid 10001 commbench \
    && useradd --create-home --uid 10001 --gid 10001 commbench \
    && mkdir -p /workspace/results \
    && chown -R 10001:10001 /workspace
USER 10001

ENTRYPOINT ["commbench"]
CMD ["--help"]
