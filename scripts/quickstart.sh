#!/usr/bin/env bash
# fedctl quick start: a working federation with simulated members, on one machine.
#
#   scripts/quickstart.sh [up]   install what is missing, build, start etcd + fedctl server +
#                                fedsim members, join them, place a sample workload, print the
#                                kubectl commands that show it (run again: restart everything)
#   scripts/quickstart.sh down   stop everything this script started (by pid)
#
# State (pids, logs, certificates, kubeconfigs) lives in .fedctl-quickstart/ at the repo root.
# Everything listens on loopback only: the API on 16443 (FEDCTL_API_PORT, 1-65535), etcd on
# 23791 and 23792 (FEDCTL_ETCD_PORT, 1-65534, and the port after it). Also: FEDCTL_MEMBERS
# (space-separated names, each a lowercase DNS-1123 label of at most 54 characters),
# FEDCTL_NODES and FEDCTL_PODS_PER_NODE (per member, positive integers), FEDCTL_PROFILE
# (release, or dev: a debug build). A bad value stops it before anything starts (exit 2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STATE="$ROOT/.fedctl-quickstart"
# set but empty is a bad value, not the default (checked in check_overrides)
MEMBERS=${FEDCTL_MEMBERS-"member-a member-b member-c"}
NODES=${FEDCTL_NODES-20}
PODS_PER_NODE=${FEDCTL_PODS_PER_NODE-20}
ETCD_PORT=${FEDCTL_ETCD_PORT-23791}
API_PORT=${FEDCTL_API_PORT-16443}
PROFILE=${FEDCTL_PROFILE-release}   # dev builds (or reuses) a debug build
# a member's name becomes its Cluster's name, whose exec namespace fed-exec-<name> must be
# a DNS-1123 label (≤ 63 characters) too: fedctl join refuses longer names
MAX_MEMBER_NAME_LEN=54

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
}

# checks every override before anything is built, started or stopped: each bad value is named
# in one line with what is accepted, and the script exits 2 (a value such as
# FEDCTL_ETCD_PORT=abc would otherwise be 0 in $((…)) and fail much later, or not at all)
check_overrides() {
  local bad=0 m seen=" " names=()
  reject() { # variable, value, what is accepted
    echo "$1=\"$2\" is not accepted: $3" >&2
    bad=1
  }
  is_port() { [[ $1 =~ ^[1-9][0-9]{0,4}$ ]] && [ "$1" -le "$2" ]; } # value, highest
  if ! is_port "$API_PORT" 65535; then
    reject FEDCTL_API_PORT "$API_PORT" "want a decimal port from 1 to 65535"
  fi
  if ! is_port "$ETCD_PORT" 65534; then
    reject FEDCTL_ETCD_PORT "$ETCD_PORT" "want a decimal port from 1 to 65534 (etcd also listens on the port after it)"
  elif [ "$API_PORT" = "$ETCD_PORT" ] || [ "$API_PORT" = "$((ETCD_PORT + 1))" ]; then
    reject FEDCTL_API_PORT "$API_PORT" "want a port other than etcd's $ETCD_PORT and $((ETCD_PORT + 1)) (FEDCTL_ETCD_PORT and the port after it)"
  fi
  # names are split on blanks (spaces, tabs, newlines), then joined again with single spaces
  read -r -d '' -a names <<<"$MEMBERS" || true
  if [ "${#names[@]}" -eq 0 ]; then
    reject FEDCTL_MEMBERS "$MEMBERS" "want one or more member names, space-separated"
  fi
  for m in "${names[@]}"; do
    if ! [[ $m =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || [ "${#m}" -gt "$MAX_MEMBER_NAME_LEN" ]; then
      reject FEDCTL_MEMBERS "$MEMBERS" "\"$m\" is not a member name: want a lowercase DNS-1123 label of at most $MAX_MEMBER_NAME_LEN characters ([a-z0-9-], alphanumeric at both ends)"
    elif [[ $seen == *" $m "* ]]; then
      reject FEDCTL_MEMBERS "$MEMBERS" "\"$m\" is named twice: want each member once"
    fi
    seen="$seen$m "
  done
  MEMBERS="${names[*]}"
  if ! [[ $NODES =~ ^[1-9][0-9]*$ ]]; then
    reject FEDCTL_NODES "$NODES" "want a positive decimal integer (nodes per member)"
  fi
  if ! [[ $PODS_PER_NODE =~ ^[1-9][0-9]*$ ]]; then
    reject FEDCTL_PODS_PER_NODE "$PODS_PER_NODE" "want a positive decimal integer (pods per node)"
  fi
  case "$PROFILE" in
    release|dev) ;;
    *) reject FEDCTL_PROFILE "$PROFILE" "want release (the default) or dev (a debug build)" ;;
  esac
  [ "$bad" -eq 0 ] || exit 2
}

# whether pid is a live process that is still one of ours (the pid may have been reused)
is_ours() {
  kill -0 "$1" 2>/dev/null && tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qE 'etcd|fedctl|fedsim'
}

# stops every process this script started (pid files in $STATE/pids), waiting for each to
# exit (SIGKILL after 15 s), so that a restart finds its ports free; what depends on another
# stops first: the agents, the server (which revokes its leader Lease while etcd is still
# there), the simulated members, etcd last
stop_all() {
  local stopped=0 f pid name
  if [ -d "$STATE/pids" ]; then
    while IFS= read -r f; do
      [ -e "$f" ] || continue
      pid=$(cat "$f")
      name=$(basename "$f")
      if is_ours "$pid"; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 150); do
          kill -0 "$pid" 2>/dev/null || break
          sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
          kill -9 "$pid" 2>/dev/null || true
          echo "killed $name (pid $pid): it did not stop within 15 s"
        else
          echo "stopped $name (pid $pid)"
        fi
        stopped=$((stopped + 1))
      fi
      rm -f "$f"
    done < <(for f in "$STATE"/pids/*; do
               [ -e "$f" ] || continue
               case "$(basename "$f")" in agent-*) r=0 ;; server) r=1 ;; etcd) r=3 ;; *) r=2 ;; esac
               echo "$r $f"
             done | sort -k1,1n -k2 | cut -d' ' -f2-)
  fi
  [ "$stopped" -gt 0 ] || echo "nothing to stop"
}

# one argument at most: an extra one is refused rather than ignored (`up --help` would
# otherwise build and start everything)
if [ $# -gt 1 ]; then
  echo "unexpected argument after $1: $2 (one of up, down, --help)" >&2
  usage >&2
  exit 2
fi

case "${1:-up}" in
  up) ;;
  down)
    stop_all
    exit 0
    ;;
  -h|--help|help)
    usage
    exit 0
    ;;
  *)
    echo "unknown argument: $1" >&2
    usage >&2
    exit 2
    ;;
esac

check_overrides

# on any exit before the end (a failed step, an `exit 1`, Ctrl-C) what was started keeps
# running, as after a success: name each such process, where its log is, and the command that
# stops them, rather than leave them behind silently
finished=false
on_exit() {
  local status=$? f pid running=""
  "$finished" && return
  for f in "$STATE"/pids/*; do
    [ -e "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null) || continue
    if is_ours "$pid"; then
      running="$running${running:+, }$(basename "$f") (pid $pid)"
    fi
  done
  if [ -n "$running" ]; then
    echo "quickstart failed (exit $status); still running, each with its log in $STATE/logs/<name>.log: $running; stop them with: scripts/quickstart.sh down" >&2
  elif [ -n "$started" ]; then
    echo "quickstart failed (exit $status); nothing it started is still running (logs in $STATE/logs)" >&2
  fi
}
started=""
trap on_exit EXIT
# a signal ends the script through exit, so the EXIT trap above reports
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. what the build and the federation need (installed from Debian's packages when missing)
scripts/deps.sh quickstart

echo "building fedctl and fedsim ($PROFILE)…"
cargo build --profile "$PROFILE" --locked --bin fedctl --bin fedsim
if [ "$PROFILE" = dev ]; then BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug"; else BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE"; fi

stop_all
# the ports must be free: another program there would answer in our place
for port in "$ETCD_PORT" "$((ETCD_PORT + 1))" "$API_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port on 127.0.0.1 is in use by another program (set FEDCTL_API_PORT or FEDCTL_ETCD_PORT to use others)" >&2
    exit 1
  fi
done
mkdir -p "$STATE/pids" "$STATE/logs"

start() { # name, command...
  local name=$1; shift
  "$@" >"$STATE/logs/$name.log" 2>&1 &
  echo $! >"$STATE/pids/$name"
  started=yes
}

# fails at once, naming it and showing its log's end, when a process this script started has
# exited (a port taken by another program, say), instead of waiting on something that is gone
check_alive() {
  local f name
  for f in "$STATE"/pids/*; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    if ! kill -0 "$(cat "$f")" 2>/dev/null; then
      echo "$name exited; the end of $STATE/logs/$name.log:" >&2
      tail -5 "$STATE/logs/$name.log" >&2
      exit 1
    fi
  done
}

wait_for() { # description, command...
  local what=$1; shift
  for _ in $(seq 1 150); do
    if "$@" >/dev/null 2>&1; then check_alive; return 0; fi
    check_alive
    sleep 0.2
  done
  echo "timed out waiting for $what (logs in $STATE/logs)" >&2
  exit 1
}

# 2. etcd on loopback
start etcd etcd --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-cluster "default=http://127.0.0.1:$((ETCD_PORT + 1))"
wait_for etcd bash -c "exec 3<>/dev/tcp/127.0.0.1/$ETCD_PORT"

# 3. the federation control plane
start server "$BIN/fedctl" server --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --secure-port "$API_PORT" --data-dir "$STATE/server"
ADMIN="$STATE/server/admin.kubeconfig"
wait_for "fedctl server" kubectl --kubeconfig "$ADMIN" get --raw /readyz

# 4. simulated members, joined to the federation
# the CA hash the members pin comes from the join command fedctl server writes, when missing,
# before /readyz succeeds; without it no member can join, so its absence is an error (the
# server only logs a failure to write it)
JOIN_COMMAND="$STATE/server/join-command"
hash=$(sed -n 's/.*--ca-cert-hash \([^ ]*\).*/\1/p' "$JOIN_COMMAND" 2>/dev/null || true)
if [ -z "$hash" ]; then
  echo "no join command with a --ca-cert-hash in $JOIN_COMMAND, which fedctl server writes before it is ready: no member can join (see $STATE/logs/server.log)" >&2
  exit 1
fi
seed=1
for m in $MEMBERS; do
  start "fedsim-$m" "$BIN/fedsim" --name "$m" --listen 127.0.0.1:0 --nodes "$NODES" \
    --pods-per-node "$PODS_PER_NODE" --namespaces 20 --namespace-skew 1.1 --churn 5 --seed "$seed" \
    --zone "zone-$seed" --kubeconfig-out "$STATE/$m.kubeconfig"
  wait_for "fedsim $m" test -s "$STATE/$m.kubeconfig"
  wait_for "fedsim $m API" kubectl --kubeconfig "$STATE/$m.kubeconfig" get --raw /readyz
  token=$("$BIN/fedctl" token create --kubeconfig "$ADMIN" --ttl 1h)
  # --force: a re-run joins the (regenerated) member again over its earlier config
  if ! "$BIN/fedctl" join "$m" --server "https://127.0.0.1:$API_PORT" --token "$token" --ca-cert-hash "$hash" \
    --kubeconfig "$STATE/$m.kubeconfig" --zone "zone-$seed" --labels "env=prod" --config-dir "$STATE/agent-$m" \
    --force >"$STATE/logs/join-$m.log" 2>&1; then
    cat "$STATE/logs/join-$m.log" >&2
    exit 1
  fi
  start "agent-$m" "$BIN/fedctl" agent --config "$STATE/agent-$m"
  seed=$((seed + 1))
done
for m in $MEMBERS; do
  wait_for "cluster $m Ready" bash -c "kubectl --kubeconfig '$ADMIN' get cluster '$m' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -q True"
done

# 5. a sample workload placed on the members
kubectl --kubeconfig "$ADMIN" apply -f "$ROOT/testdata/manifests/quickstart.yaml"
# its policy places shop/web on member-a and member-b: wait (at most 60 s) until the
# members run all its replicas, so that what is printed below shows them
web_status=""
case " $MEMBERS " in
  *" member-a "*|*" member-b "*)
    want=$(kubectl --kubeconfig "$ADMIN" get deploy web -n shop -o jsonpath='{.spec.replicas}')
    ready=0
    deadline=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$deadline" ]; do
      ready=$(kubectl --kubeconfig "$ADMIN" get deploy web -n shop -o jsonpath='{.status.readyReplicas}' 2>/dev/null || true)
      [ "${ready:-0}" = "$want" ] && break
      check_alive
      sleep 0.4
    done
    web_status="the sample Deployment shop/web: ${ready:-0} of $want replicas ready"
    ;;
esac

first_member=${MEMBERS%% *}
finished=true
cat <<EOF

fedctl federation is up (state in $STATE)${web_status:+; $web_status}:
  export KUBECONFIG=$ADMIN
  kubectl get clusters                     # members, readiness, versions, nodes
  kubectl get deploy,propagationpolicies -n shop
  kubectl get works -A                     # what was placed on each member
  kubectl --context global get pods -A     # every member's pods through one API
  kubectl --context cluster-$first_member get nodes
The binaries are $BIN/fedctl and $BIN/fedsim (\`$BIN/fedctl --help\`).
Logs: $STATE/logs/
Stop everything with: scripts/quickstart.sh down
EOF
