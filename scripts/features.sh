#!/usr/bin/env bash
# The cargo feature flags the workspace is built and tested with (setup.sh, test.sh): the
# etcd backend of dt-rdzv when protoc is there to build etcd-client with, else none (the
# etcd backend's tests then skip, saying why).
if command -v protoc >/dev/null 2>&1 || [ -n "${PROTOC:-}" ]; then
  echo "--features dt-rdzv/etcd"
fi
