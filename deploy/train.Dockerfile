# A training image for deploy/k8s/train-*.yaml: Python 3.11, the dtcomm wheel that
# scripts/build_wheels.sh made (the same file a user pip-installs: dtrun, dt-rdzv, the "dtcomm"
# torch.distributed backend, the native rendezvous client), torch, and examples/train_ddp.py.
# From the repository root:
#
#   scripts/build_wheels.sh --no-sdist       # .whl/dist/dtcomm-V-cp311-abi3-manylinux_2_28_ARCH.whl
#   docker build -f deploy/train.Dockerfile -t dtcomm-train:0.1.0 .
#
# Your own training image only needs `pip install dtcomm` (this wheel) beside torch: dtrun is
# the entry point the manifests start. torch comes from the package index pip is configured
# with (pick a CPU-only or a CUDA build there; dtcomm loads CUDA and NCCL at run time).

FROM python:3.11-slim-bookworm
ARG WHEEL_DIR=.whl/dist
COPY ${WHEEL_DIR}/ /wheels/
RUN set -eu; \
    whl="$(ls /wheels/dtcomm-*-cp311-abi3-manylinux_2_28_"$(uname -m)".whl | tail -n 1)"; \
    pip install --no-cache-dir "$whl[torch]"; \
    rm -rf /wheels; \
    dt-rdzv --version; dtrun --version; \
    groupadd --gid 10001 train; \
    useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin train
COPY examples/train_ddp.py /opt/dtcomm/examples/train_ddp.py
USER 10001:10001
WORKDIR /home/train
ENTRYPOINT ["dtrun"]
