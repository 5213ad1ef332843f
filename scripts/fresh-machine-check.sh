#!/usr/bin/env bash
# Proves the two README commands on a new machine: builds a minimal Debian root with
# debootstrap, adds only what a user brings (the Rust toolchain and kubectl, bind-mounted
# read-only from this machine), then inside it, each from a fresh clone of this repository's
# HEAD, runs the quick start (and checks its result) and then .ci/run. Prints what each step
# installed and how long it took.
#
#   scripts/fresh-machine-check.sh [--root DIR] [--keep] [--no-quickstart] [--no-ci]
#
#   --root DIR        where the Debian root is built (default /var/tmp/fedctl-fresh-root;
#                     an existing one is removed first)
#   --keep            leave the root in place afterwards (default: removed)
#   --reuse-root      keep a root that an earlier --keep run left, with what it installed
#                     (to iterate on a later step; a proof of set-up needs a new root)
#   --no-quickstart   skip the quick start;  --no-ci   skip .ci/run
#
# Needs root, debootstrap, unshare and chroot, and the Debian package registry this machine's
# apt uses (its sources are copied into the root). Its own mounts live in a private mount
# namespace, so nothing stays mounted when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
ROOTDIR=/var/tmp/fedctl-fresh-root
KEEP=false
REUSE=false
RUN_QS=true
RUN_CI=true
while [ $# -gt 0 ]; do
  case "$1" in
    --root) ROOTDIR=$2; shift 2 ;;
    --keep) KEEP=true; shift ;;
    --reuse-root) REUSE=true; shift ;;
    --no-quickstart) RUN_QS=false; shift ;;
    --no-ci) RUN_CI=false; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" -eq 0 ] || { echo "run as root (debootstrap and chroot need it)" >&2; exit 1; }
for c in debootstrap unshare chroot git; do
  command -v "$c" >/dev/null || { echo "missing $c (Debian: apt-get install debootstrap util-linux coreutils git)" >&2; exit 1; }
done
command -v rustc >/dev/null || { echo "missing rustc: the Rust toolchain the root borrows" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "missing kubectl: the kubectl the root borrows" >&2; exit 1; }

# What the user brings: the active Rust toolchain and the folder holding kubectl (and
# kubectl.1.27 … kubectl.1.33 beside it, as the Google Cloud SDK installs them).
TOOLCHAIN=$(rustc --print sysroot)
KUBECTL_DIR=$(dirname "$(readlink -f "$(command -v kubectl)")")
. /etc/os-release
SUITE=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
# The Debian mirror this machine's apt already uses: the first URI of a source for $SUITE.
MIRROR=$(
  { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/{print $2}'
    grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}'; } |
    grep -v -- '-security' | head -1 || true
)
[ -n "$MIRROR" ] || { echo "no Debian mirror found in /etc/apt/sources*" >&2; exit 1; }

SUMMARY=()
t0=$(date +%s)
step_start=$t0
note() { # step name, what it installed
  local now; now=$(date +%s)
  SUMMARY+=("$(printf '%-34s %6ss   %s' "$1" "$((now - step_start))" "$2")")
  step_start=$now
}

if $REUSE && [ -x "$ROOTDIR/usr/bin/apt-get" ]; then
  echo "== 1. reusing the Debian root in $ROOTDIR (not a proof of set-up)"
  pkgs_before=$(chroot "$ROOTDIR" dpkg-query -W -f '${Package}\n' | sort)
  note "reused root" "$(wc -l <<<"$pkgs_before") packages"
else
  echo "== 1. a minimal Debian $SUITE root in $ROOTDIR"
  if [ -e "$ROOTDIR" ]; then
    if grep -q " $ROOTDIR[/ ]" /proc/mounts; then echo "$ROOTDIR has mounts; not removing it" >&2; exit 1; fi
    rm -rf "$ROOTDIR"
  fi
  debootstrap --variant=minbase "$SUITE" "$ROOTDIR" "$MIRROR" >/tmp/fedctl-debootstrap.log 2>&1 ||
    { tail -20 /tmp/fedctl-debootstrap.log >&2; exit 1; }
  # the same package sources and apt settings as this machine, and its name resolution
  cp -a /etc/apt/sources.list.d/. "$ROOTDIR/etc/apt/sources.list.d/" 2>/dev/null || true
  # (debootstrap's own sources.list would name the mirror twice beside a copied .sources file)
  if [ -f /etc/apt/sources.list ]; then cp /etc/apt/sources.list "$ROOTDIR/etc/apt/sources.list"; else rm -f "$ROOTDIR/etc/apt/sources.list"; fi
  find "$ROOTDIR/etc/apt/sources.list.d" -name '*disabled*' -delete
  for f in /etc/apt/apt.conf.d/*; do [ -e "$ROOTDIR/etc/apt/apt.conf.d/$(basename "$f")" ] || cp "$f" "$ROOTDIR/etc/apt/apt.conf.d/"; done
  cp /etc/resolv.conf "$ROOTDIR/etc/resolv.conf"
  # Every installed Debian system names localhost in /etc/hosts (the installer and cloud
  # images write it); debootstrap's minbase root has no /etc/hosts at all, and chromedriver
  # reaches the browser it starts at ws://localhost:<port>.
  [ -e "$ROOTDIR/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$ROOTDIR/etc/hosts"
  # Certificate authorities this site adds to the system's trust (a TLS-inspecting proxy, say):
  # a user's machine on this network has them too. ca-certificates, once the build's set-up
  # installs it in the root, takes them in.
  if [ -d /usr/local/share/ca-certificates ]; then
    mkdir -p "$ROOTDIR/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$ROOTDIR/usr/local/share/ca-certificates/"
  fi
  mkdir -p "$ROOTDIR/opt/rust" "$ROOTDIR/opt/kubectl" "$ROOTDIR/home/user"
  pkgs_before=$(chroot "$ROOTDIR" dpkg-query -W -f '${Package}\n' | sort)
  echo "   $(wc -l <<<"$pkgs_before") packages; of what the build needs, present:"
  for p in libprotobuf-dev protobuf-compiler etcd-server gcc git ca-certificates; do
    if grep -qx "$p" <<<"$pkgs_before"; then echo "     $p: yes"; else echo "     $p: no"; fi
  done
  note "debootstrap --variant=minbase" "$(wc -l <<<"$pkgs_before") packages"
fi

# Runs a command as the user inside the root, with only the borrowed tools added.
in_root() {
  unshare --mount --propagation private -- bash -euc '
    R=$1; shift
    mount -t proc proc "$R/proc"
    mount --rbind /dev "$R/dev"
    mount -t tmpfs tmpfs "$R/tmp"
    mount --bind "$TOOLCHAIN" "$R/opt/rust"; mount -o remount,bind,ro "$R/opt/rust"
    mount --bind "$KUBECTL_DIR" "$R/opt/kubectl"; mount -o remount,bind,ro "$R/opt/kubectl"
    exec chroot "$R" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI=true \
      PATH=/opt/rust/bin:/opt/kubectl:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      bash -euc "$*"
  ' in_root "$ROOTDIR" "$@"
}
export TOOLCHAIN KUBECTL_DIR

installed_since() { # packages installed in the root since the list in $1
  comm -13 <(printf '%s\n' "$1") <(chroot "$ROOTDIR" dpkg-query -W -f '${Package}\n' | sort) | tr '\n' ' '
}

clone() { # a fresh clone of this repository's HEAD at /home/user/$1 in the root
  local dir="$ROOTDIR/home/user/$1"
  # --reuse-root keeps an earlier build (target/) of that clone
  if $REUSE && [ -d "$dir/target" ]; then mv "$dir/target" "$ROOTDIR/home/user/.target-$1"; fi
  rm -rf "$dir"
  git clone -q --no-hardlinks "$REPO" "$dir"
  git -C "$dir" checkout -q "$(git -C "$REPO" rev-parse HEAD)"
  if [ -d "$ROOTDIR/home/user/.target-$1" ]; then mv "$ROOTDIR/home/user/.target-$1" "$dir/target"; fi
}

echo "== 2. the user's tools: $TOOLCHAIN and $KUBECTL_DIR (read-only)"
in_root 'cargo --version; rustc --version; kubectl version --client 2>/dev/null | head -1'
note "borrowed rust + kubectl" "-"

if $RUN_QS; then
  echo "== 3. scripts/quickstart.sh in a fresh clone ($(git rev-parse --short HEAD))"
  clone fedctl
  before=$(chroot "$ROOTDIR" dpkg-query -W -f '${Package}\n' | sort)
  in_root 'cd /home/user/fedctl && scripts/quickstart.sh'
  qs_installed=$(installed_since "$before")
  note "scripts/quickstart.sh (build+up)" "installed: ${qs_installed:-nothing}"
  echo "== 4. checking the quick start's federation"
  qs_down() { in_root 'cd /home/user/fedctl && scripts/quickstart.sh down' >/dev/null; }
  in_root '
    cd /home/user/fedctl && export KUBECONFIG=.fedctl-quickstart/server/admin.kubeconfig
    kubectl get clusters
    ready=$(kubectl get clusters -o jsonpath="{range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}" | grep -c True || true)
    members=$(kubectl get clusters --no-headers | wc -l)
    [ "$members" -ge 2 ] && [ "$ready" -eq "$members" ] || { echo "FAIL: $ready of $members members Ready"; exit 1; }
    # the sample Deployment (6 replicas divided over two members) placed and ready
    want=$(kubectl get deploy web -n shop -o jsonpath="{.spec.replicas}")
    for _ in $(seq 1 200); do
      ready=$(kubectl get deploy web -n shop -o jsonpath="{.status.readyReplicas}")
      [ "${ready:-0}" = "$want" ] && break; sleep 0.3
    done
    kubectl get works -A
    kubectl get deploy web -n shop
    [ "${ready:-0}" = "$want" ] || { echo "FAIL: the sample Deployment has ${ready:-0} of $want replicas ready"; exit 1; }
    clusters=$(kubectl --context global get pods -A --no-headers | awk "{print \$3}" | sort -u | wc -l)
    pods=$(kubectl --context global get pods -A --no-headers | wc -l)
    echo "global view: $pods pods from $clusters members"
    [ "$clusters" -eq "$members" ] || { echo "FAIL: the global view lists pods of $clusters of $members members"; exit 1; }
  ' || { qs_down; echo "FAIL: the quick start's federation is not as it should be" >&2; exit 1; }
  qs_down
  note "quick start checked, then down" "-"
fi

if $RUN_CI; then
  echo "== 5. .ci/run in a fresh clone"
  clone fedctl-ci
  before=$(chroot "$ROOTDIR" dpkg-query -W -f '${Package}\n' | sort)
  set +e
  in_root 'cd /home/user/fedctl-ci && bash .ci/run' >/tmp/fedctl-fresh-ci.log 2>&1
  rc=$?
  set -e
  grep -E '^(installing|etcd Version|protoc:|test result:|error|FAILED|failures:)' /tmp/fedctl-fresh-ci.log || true
  awk '/^test result:/{p+=$4; f+=$6; i+=$8} END{printf "   test binaries: %d passed, %d failed, %d ignored\n", p, f, i}' /tmp/fedctl-fresh-ci.log
  ci_installed=$(installed_since "$before")
  note ".ci/run (build + every test)" "exit $rc; installed: ${ci_installed:-nothing}"
  [ "$rc" -eq 0 ] || { printf '%s\n' "${SUMMARY[@]}"; echo "FAIL: .ci/run exited $rc (log /tmp/fedctl-fresh-ci.log)"; exit 1; }
fi

echo
echo "== summary (commit $(git rev-parse --short HEAD), $(nproc) cores, $(date -u +%F))"
printf '%s\n' "${SUMMARY[@]}"
echo "total: $(( $(date +%s) - t0 )) s"
if ! $KEEP; then
  grep -q " $ROOTDIR[/ ]" /proc/mounts || rm -rf "$ROOTDIR"
fi
echo "PASS"
