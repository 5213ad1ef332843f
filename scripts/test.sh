#!/usr/bin/env bash
# Runs every test: unit tests, and integration tests against real etcd, real fedctl
# processes, fedsim members and kubectl. Needs `etcd` and `protoc` on PATH (see .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v etcd >/dev/null || { echo "etcd not found: apt-get install etcd-server" >&2; exit 1; }
command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }
exec cargo test --locked "$@"
