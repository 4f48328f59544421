# commbench in a container: the image `commbench k8s-manifest --image` runs on every pod
# (docs/multinode.md, "A container image"). Build it from the repository's root:
#   docker build -t REGISTRY/commbench:0.1 .
#
# The base is PyTorch's official CUDA runtime image: torch built for CUDA 12.8 with its own
# NCCL, which commbench measures as it is (pip keeps a torch that meets commbench's
# torch>=2.5, so it installs no other). CUDA 12.8 needs an NVIDIA driver >= 525 on the
# nodes (docs/development.md, "Which torch for which driver").
FROM pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime

# Installed as the README installs it, without the dev extra: the package and what
# pyproject.toml names (README.md is its long description)
WORKDIR /src
COPY pyproject.toml README.md ./
COPY commbench ./commbench
RUN pip install --no-cache-dir .

# Not root: a benchmark needs no privilege in the pod. A uid no base image gives another
# user (Ubuntu 24.04's own user is 1000), and numeric, so that Kubernetes' runAsNonRoot can
# check it. The manifest's pods work in /workspace, the results volume at
# /workspace/results (an emptyDir anyone may write; a claim must let this uid write).
WORKDIR /workspace
RUN rm -rf /src \
    && useradd --create-home --uid 10001 --user-group commbench \
    && mkdir -p /workspace/results \
    && chown -R 10001:10001 /workspace
USER 10001

ENTRYPOINT ["commbench"]
CMD ["--help"]
