#!/usr/bin/env bash
# The cargo feature flags the workspace is built and tested with (setup.sh, test.sh): the
# etcd backend of dt-rdzv when protoc and protobuf's well-known .proto files (Debian's
# libprotobuf-dev, or $PROTOC_INCLUDE) are there to build etcd-client with, else none (the
# etcd backend's tests then skip, saying why).
if { command -v protoc >/dev/null 2>&1 || [ -n "${PROTOC:-}" ]; } \
   && { [ -f /usr/include/google/protobuf/descriptor.proto ] \
        || [ -f "${PROTOC_INCLUDE:-/nonexistent}/google/protobuf/descriptor.proto" ]; }; then
  echo "--features dt-rdzv/etcd"
fi
