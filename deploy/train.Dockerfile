# A training image for deploy/k8s/train-*.yaml: Python 3.11, the dtcomm wheel built from this
# checkout (dtrun, the "dtcomm" torch.distributed backend, the native rendezvous client), torch,
# and examples/train_ddp.py. Build from the repository root:
#
#   docker build -f deploy/train.Dockerfile -t dtcomm-train:0.1.0 .
#
# Your own training image only needs `pip install dtcomm` (this wheel) beside torch: dtrun is
# the entry point the manifests start. torch comes from the package index pip is configured
# with (pick a CPU-only or a CUDA build there; dtcomm loads CUDA and NCCL at run time).

FROM rust:1-bookworm AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/build && /opt/build/bin/pip install --no-cache-dir "maturin>=1.9,<2"
WORKDIR /src
COPY Cargo.toml Cargo.lock pyproject.toml README.md ./
COPY rdzv rdzv
COPY collectives collectives
COPY ffi ffi
COPY benches benches
COPY python python
RUN /opt/build/bin/maturin build --release --locked --interpreter python3 --out /wheels

FROM python:3.11-slim-bookworm
COPY --from=builder /wheels /wheels
RUN pip install --no-cache-dir "$(ls /wheels/dtcomm-*.whl)[torch]" && rm -rf /wheels \
 && groupadd --gid 10001 train \
 && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin train
COPY examples/train_ddp.py /opt/dtcomm/examples/train_ddp.py
USER 10001:10001
WORKDIR /home/train
ENTRYPOINT ["dtrun"]
