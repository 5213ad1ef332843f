#!/usr/bin/env bash
# What fedctl's build, its tests and its quick start need from a Debian machine, checked by
# the files and commands they really use, and installed from Debian's packages when missing.
#
#   scripts/deps.sh build|test|quickstart            check, install what is missing, check again
#   scripts/deps.sh build|test|quickstart --check    check only; exit 1 on the first gap
#
# Each need is one line below: what is looked for (a command, or an absolute file path), the
# Debian package that provides it, and why. A gap that remains is reported as one line naming
# the package, before any build starts. Rust (cargo) and kubectl are the user's: they are
# checked, never installed.
set -euo pipefail

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }

# need: <command or /path> <package> <why>
BUILD_NEEDS=(
  "cc gcc the C compiler that ring, zstd-sys and jemalloc build with (and rustc links with)"
  "/usr/include/stdio.h libc6-dev C headers and start files for those builds"
  "make make jemalloc's build (tikv-jemalloc-sys)"
  "git git the commit recorded by build.rs, and cloning"
  "protoc protobuf-compiler etcd-client's build script compiles etcd's .proto files"
  "/usr/include/google/protobuf/descriptor.proto libprotobuf-dev the well-known .proto files etcd's protos import (only recommended by protobuf-compiler)"
  "/etc/ssl/certs/ca-certificates.crt ca-certificates cargo fetching crates over HTTPS"
)
RUN_NEEDS=(
  "etcd etcd-server the federation's store"
  "kill procps stopping the processes the tests and the quick start start, by pid"
)
TEST_NEEDS=(
  "taskset util-linux pinning benchmark processes in the tests"
  "systemd-analyze systemd verifying the shipped systemd units"
  "chromium chromium the headless browser the web console's test (tests/console.rs) drives"
  "chromedriver chromium-driver the WebDriver server that test drives chromium through"
)
USER_NEEDS=(
  "cargo the Rust toolchain: install it with rustup"
  "kubectl kubectl 1.27 to 1.33 (the Google Cloud SDK ships kubectl.1.27 … kubectl.1.33 beside it)"
)

mode=${1:-}
check_only=false
[ "${2:-}" = "--check" ] && check_only=true
case "$mode" in
  build) needs=("${BUILD_NEEDS[@]}") ;;
  test) needs=("${BUILD_NEEDS[@]}" "${RUN_NEEDS[@]}" "${TEST_NEEDS[@]}") ;;
  quickstart) needs=("${BUILD_NEEDS[@]}" "${RUN_NEEDS[@]}") ;;
  -h|--help|help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac

have() { # an executable file on PATH (a shell builtin such as kill does not count), or a path
  case "$1" in
    /*) [ -e "$1" ] ;;
    *) type -P "$1" >/dev/null 2>&1 ;;
  esac
}

# the user's own tools first: nothing can be installed for them
for line in "${USER_NEEDS[@]}"; do
  read -r what why <<<"$line"
  have "$what" || { echo "missing $what: $why" >&2; exit 1; }
done

# the tests run the oldest and newest kubectl they support
if [ "$mode" = test ]; then
  kdir=${FEDCTL_KUBECTL_DIR:-$(dirname "$(readlink -f "$(command -v kubectl)")")}
  for v in 1.27 1.33; do
    [ -x "$kdir/kubectl.$v" ] || { echo "missing $kdir/kubectl.$v: the tests run kubectl 1.27 and 1.33 (set FEDCTL_KUBECTL_DIR to the folder that holds kubectl.1.27 and kubectl.1.33)" >&2; exit 1; }
  done
fi

missing_pkgs() {
  local line what pkg why seen=" "
  for line in "${needs[@]}"; do
    read -r what pkg why <<<"$line"
    if ! have "$what" && [[ "$seen" != *" $pkg "* ]]; then
      seen+="$pkg "
      printf '%s\n' "$pkg"
    fi
  done
}

report_first_gap() {
  local line what pkg why
  for line in "${needs[@]}"; do
    read -r what pkg why <<<"$line"
    if ! have "$what"; then
      echo "missing $what (Debian package $pkg: $why)" >&2
      return 1
    fi
  done
}

mapfile -t pkgs < <(missing_pkgs)
if [ "${#pkgs[@]}" -eq 0 ]; then
  exit 0
fi
if $check_only; then
  report_first_gap
  exit 1
fi

echo "installing from Debian: ${pkgs[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
report_first_gap
