#!/usr/bin/env bash
# Builds fedctl (and fedsim) as statically linked x86_64 Linux binaries (glibc, crt-static):
# they run on a machine with no Rust and no shared libraries beyond the kernel.
# Output: target/x86_64-unknown-linux-gnu/release/{fedctl,fedsim}
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static"
cargo build --release --locked --target x86_64-unknown-linux-gnu --bin fedctl --bin fedsim
out="${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release"
for b in fedctl fedsim; do
  file "$out/$b" 2>/dev/null || ls -l "$out/$b"
done
