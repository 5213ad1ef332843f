#!/usr/bin/env bash
# Runs every test: unit tests, and integration tests against real etcd, real fedctl
# processes, fedsim members and kubectl 1.27 and 1.33. Checks first that the machine has what
# they need (scripts/deps.sh test --check names the Debian package of any gap; .ci/run and
# `scripts/deps.sh test` install them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test --check
exec cargo test --locked "$@"
