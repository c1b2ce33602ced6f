#!/usr/bin/env bash
# deploy/wan/netns.sh: emulates a wide-area link with network namespaces, veth pairs and tbf
# (run as root). One namespace for the server (mwan-s-TAG) and one per worker (mwan-wI-TAG),
# each worker joined to the server by its own veth pair and shaped with tbf on the egress of
# BOTH ends, so uplink and downlink are each limited to their rate. Nothing is routed to the
# host: traffic stays inside the namespaces made here.
#
#   netns.sh up TAG N RATE_MBIT [UP_MBIT]   make the server namespace and N worker namespaces
#   netns.sh shape TAG RATE_MBIT [UP_MBIT]  change the rates of every link of TAG (0: unshaped)
#   netns.sh down TAG                       remove everything TAG made (idempotent)
#   netns.sh exec TAG server|wI CMD         run CMD in that namespace
#   netns.sh addr TAG wI                    the server's address as seen from worker I
#   netns.sh show TAG                       the namespaces, addresses and qdiscs of TAG
#
# Worker I (0-based) talks to the server over 10.200.I.0/24 (server .1, worker .2; override the
# first two octets with MWAN_NET=10.x). The addresses exist only inside these namespaces, so
# runs with different TAGs may use the same ones. RATE_MBIT may be fractional (0.16 = 160 kbit/s);
# it limits both directions, or only the downlink (server -> worker) when UP_MBIT is given for
# the uplink (worker -> server): an asymmetric home link, e.g. 100 down and 20 up.
# Interfaces: "wI" in the server namespace, "srv" in worker I's.
set -Eeuo pipefail

NET="${MWAN_NET:-10.200}"

die() { echo "netns.sh: $*" >&2; exit 2; }
usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

check_tag() {
  [[ "$1" =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || die "TAG must be 1-40 characters of [A-Za-z0-9_.-]: '$1'"
}

server_ns() { echo "mwan-s-$1"; }
worker_ns() { echo "mwan-w$2-$1"; }

# Worker namespaces of TAG that exist, as indices, in order.
worker_indices() {
  ip netns list | awk '{print $1}' | sed -n "s/^mwan-w\([0-9]\{1,\}\)-${1//./\\.}\$/\1/p" | sort -n
}

# tbf on DEV in namespace NS at RATE Mbit/s (0: remove the shaping). Burst: 5 ms at the rate,
# at least 4 KiB (a few full-size frames: tbf drops any frame larger than its burst). Queue:
# MWAN_QUEUE_MS (50) at the rate beyond the burst, at least two full-size frames: a short queue,
# as a well-managed bottleneck has; a long one (seconds at low rates) delays ACKs and pings
# behind bulk data until TCP_USER_TIMEOUT / keepalive deadlines fire.
shape_dev() {
  local ns="$1" dev="$2" rate="$3"
  ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
  if awk -v r="$rate" 'BEGIN { exit !(r + 0 <= 0) }'; then
    return 0
  fi
  local kbit burst limit
  read -r kbit burst limit < <(awk -v r="$rate" -v q="${MWAN_QUEUE_MS:-50}" 'BEGIN {
      kbit = int(r * 1000 + 0.5); if (kbit < 8) kbit = 8
      bps = kbit * 1000 / 8                    # bytes per second
      burst = int(bps * 0.005); if (burst < 4096) burst = 4096
      queue = int(bps * q / 1000); if (queue < 3028) queue = 3028
      print kbit, burst, burst + queue }')
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "${kbit}kbit" burst "$burst" limit "$limit"
}

check_rate() {
  [[ "$2" =~ ^[0-9]*\.?[0-9]+$ ]] || die "$1 must be a number: '$2'"
}

cmd_up() {
  [[ $# -eq 3 || $# -eq 4 ]] || usage
  local tag="$1" n="$2" rate="$3" up="${4:-$3}"
  check_tag "$tag"
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 250 ]] || die "N must be 1..250: '$n'"
  check_rate RATE_MBIT "$rate"
  check_rate UP_MBIT "$up"
  local s; s="$(server_ns "$tag")"
  ip netns list | awk '{print $1}' | grep -qx "$s" && die "$s exists already (netns.sh down $tag first)"
  # A failure half-way leaves nothing behind.
  trap 'echo "netns.sh: up failed; removing what was made" >&2; cmd_down "$tag" >/dev/null 2>&1 || true' ERR
  ip netns add "$s"
  ip -n "$s" link set lo up
  local i w
  for ((i = 0; i < n; i++)); do
    w="$(worker_ns "$tag" "$i")"
    ip netns add "$w"
    ip -n "$w" link set lo up
    # Made directly inside the namespaces: the names never meet in the host's namespace.
    ip link add "w$i" netns "$s" type veth peer name srv netns "$w"
    ip -n "$s" addr add "$NET.$i.1/24" dev "w$i"
    ip -n "$w" addr add "$NET.$i.2/24" dev srv
    ip -n "$s" link set "w$i" up
    ip -n "$w" link set srv up
    shape_dev "$s" "w$i" "$rate"   # server -> worker (downlink)
    shape_dev "$w" srv "$up"       # worker -> server (uplink)
  done
  trap - ERR
  echo "made $s and $n worker namespace(s), $rate Mbit/s down and $up up per link (0: unshaped):"
  cmd_show "$tag"
}

cmd_shape() {
  [[ $# -eq 2 || $# -eq 3 ]] || usage
  local tag="$1" rate="$2" up="${3:-$2}" i
  check_tag "$tag"
  check_rate RATE_MBIT "$rate"
  check_rate UP_MBIT "$up"
  local s; s="$(server_ns "$tag")"
  ip netns list | awk '{print $1}' | grep -qx "$s" || die "no namespace $s (netns.sh up first)"
  for i in $(worker_indices "$tag"); do
    shape_dev "$s" "w$i" "$rate"
    shape_dev "$(worker_ns "$tag" "$i")" srv "$up"
  done
  echo "links of $tag now at $rate Mbit/s down and $up up (0: unshaped)"
}

cmd_down() {
  [[ $# -eq 1 ]] || usage
  local tag="$1" ns removed=0
  check_tag "$tag"
  # Deleting a namespace deletes its veth ends (and so the peers); processes still inside
  # would keep it alive, so they are listed, never killed here.
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^mwan-(s|w[0-9]+)-${tag//./\\.}\$" || true); do
    local pids; pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
    [[ -n "$pids" ]] && echo "netns.sh: warning: processes still in $ns: $pids" >&2
    ip netns del "$ns" && { echo "removed $ns"; removed=$((removed + 1)); }
  done
  [[ $removed -gt 0 ]] || echo "nothing to remove for $tag"
}

cmd_exec() {
  [[ $# -ge 3 ]] || usage
  local tag="$1" who="$2"; shift 2
  check_tag "$tag"
  local ns
  case "$who" in
    server) ns="$(server_ns "$tag")" ;;
    w[0-9]*) ns="$(worker_ns "$tag" "${who#w}")" ;;
    *) die "say server or wI, not '$who'" ;;
  esac
  exec ip netns exec "$ns" "$@"
}

cmd_addr() {
  [[ $# -eq 2 && "$2" =~ ^w[0-9]+$ ]] || usage
  echo "$NET.${2#w}.1"
}

cmd_show() {
  [[ $# -eq 1 ]] || usage
  local tag="$1" s i
  s="$(server_ns "$tag")"
  for i in $(worker_indices "$tag"); do
    local w; w="$(worker_ns "$tag" "$i")"
    printf '  %s  %-6s %-16s <-> %s  %-4s %-16s\n' "$s" "w$i" "$NET.$i.1" "$w" srv "$NET.$i.2"
    printf '    down: %s\n' "$(ip netns exec "$s" tc qdisc show dev "w$i" | head -1)"
    printf '    up:   %s\n' "$(ip netns exec "$w" tc qdisc show dev srv | head -1)"
  done
}

[[ $# -ge 1 ]] || usage
[[ $(id -u) -eq 0 ]] || die "run as root (ip netns needs it)"
sub="$1"; shift
case "$sub" in
  up) cmd_up "$@" ;;
  shape) cmd_shape "$@" ;;
  down) cmd_down "$@" ;;
  exec) cmd_exec "$@" ;;
  addr) cmd_addr "$@" ;;
  show) cmd_show "$@" ;;
  *) usage ;;
esac
