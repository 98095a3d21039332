#!/usr/bin/env bash
# Two "hosts" on this machine: two network namespaces, each with its own
# host name, joined by two veth links, for MPI runs whose ranks talk over TCP
# as on two machines (tests/cli_hosts.sh, docs/ARCHITECTURE.md "Across
# hosts"). Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN), iproute2 and
# unshare (util-linux).
#
#   two_hosts.sh probe          exit 0 if namespaces can be made here, else say why and exit 1
#   two_hosts.sh up ID          make the hosts cleave-ID-h1 and cleave-ID-h2
#   two_hosts.sh run ID [MPIRUN-OPTION...] -- CMD [ARG...]
#                               mpirun on h1, one rank of CMD per host (rank 0 on h1, rank 1 on h2)
#   two_hosts.sh cut ID [data|all]
#                               take the data link down (default), or both links (h2's ends: both ends lose carrier)
#   two_hosts.sh pids ID HOST   the processes running in host h1 or h2
#   two_hosts.sh down ID        kill what still runs in the hosts, remove them (and the links)
#   two_hosts.sh rsh HOST CMD   mpirun's remote shell (plm_rsh_agent): run CMD on HOST
#
# How: `ip link add ... netns A type veth peer ... netns B` makes each pair
# directly inside the namespaces (both ends of a pair have one name, so
# nothing is ever named in this machine's own namespace): clv0, the data
# link (169.254.100.1/30 on h1, .2 on h2, link-local), and clm0, the
# management link (169.254.101.0/30). The namespaces are separate, so
# parallel runs with other IDs reuse the same addresses without meeting.
# mpirun runs in h1 (under `unshare --uts`, host name cleave-ID-h1); for
# h2 it starts its daemon (orted) through this script's `rsh`, which enters
# h2 the same way, so the daemons talk TCP over clm0 (oob) and the ranks
# over clv0 (btl tcp; no shared memory: the hosts have different names,
# and only tcp and self are allowed). The daemons' TCP keepalive is 1 s
# idle, then 2 probes 1 s apart, so mpirun notices a host it can no longer
# reach in about 3 s (by default it took minutes, and hung in the
# meantime); a failed job's ranks are killed at once (odls_base_sigkill_timeout 0:
# by default each daemon spent 2 s on SIGCONT, SIGTERM and SIGKILL to ranks
# already dead). Everything stays in namespaces named cleave-ID-*, removed by
# `down`; callers run `down` from a trap.
set -u
self=$(readlink -f "$0")
DATA=169.254.100   # clv0: the ranks' messages (btl tcp)
MGMT=169.254.101   # clm0: mpirun and its daemons (oob tcp)

die() { echo "two_hosts.sh: $*" >&2; exit 1; }
ns() { echo "cleave-$1-h$2"; }
state() { echo "${TMPDIR:-/tmp}/cleave-two-hosts.$1"; }
check_id() { [[ "${1:-}" =~ ^[A-Za-z0-9_]{1,32}$ ]] || die "bad ID '${1:-}' (1-32 letters, digits or _)"; }

# link NAME NET: a veth pair NAME between the hosts n1 and n2, NET.1 on h1, NET.2 on h2
link() {
    ip link add "$1" netns "$n1" type veth peer name "$1" netns "$n2" &&
        ip -n "$n1" addr add "$2.1/30" dev "$1" && ip -n "$n2" addr add "$2.2/30" dev "$1" &&
        ip -n "$n1" link set "$1" up && ip -n "$n2" link set "$1" up
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
probe)
    for t in ip unshare mpirun; do command -v "$t" >/dev/null 2>&1 || { echo "no $t"; exit 1; }; done
    p="cleave-probe-$$"
    if ! err=$(ip netns add "$p" 2>&1); then echo "ip netns add failed: $err"; exit 1; fi
    err=$(ip link add clv0 netns "$p" type veth peer name clv1 netns "$p" 2>&1 &&
          ip netns exec "$p" unshare --uts true 2>&1)
    ok=$?
    ip netns del "$p"
    [ $ok -eq 0 ] || { echo "veth or unshare in a namespace failed: $err"; exit 1; }
    exit 0
    ;;
up)
    check_id "${1:-}"
    id=$1 n1=$(ns "$1" 1) n2=$(ns "$1" 2)
    ip netns add "$n1" || die "could not make namespace $n1"
    if ! { ip netns add "$n2" &&
           link clv0 "$DATA" && link clm0 "$MGMT" &&
           ip -n "$n1" link set lo up && ip -n "$n2" link set lo up &&
           mkdir -p "$(state "$id")" &&
           printf '%s slots=1\n%s slots=1\n' "$n1" "$n2" > "$(state "$id")/hostfile"; }; then
        "$self" down "$id"
        die "could not set up hosts $n1 and $n2"
    fi
    ;;
down)
    check_id "${1:-}"
    for h in 1 2; do
        n=$(ns "$1" $h)
        ip netns list | grep -q "^$n\( \|$\)" || continue
        for pid in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$n" || echo "two_hosts.sh: could not remove namespace $n" >&2
    done
    rm -rf "$(state "$1")"
    ;;
cut)
    check_id "${1:-}"
    case "${2:-data}" in
    data) ip -n "$(ns "$1" 2)" link set clv0 down ;;
    all) ip -n "$(ns "$1" 2)" link set clv0 down && ip -n "$(ns "$1" 2)" link set clm0 down ;;
    *) die "cut: expected data or all, not '$2'" ;;
    esac
    ;;
pids)
    check_id "${1:-}"
    case "${2:-}" in h1) h=1 ;; h2) h=2 ;; *) die "pids: HOST is h1 or h2" ;; esac
    ip netns pids "$(ns "$1" $h)"
    ;;
rsh)
    # plm_rsh_agent: HOST then the daemon's command line as words of a shell command
    n=${1:-}
    shift
    [[ "$n" =~ ^cleave-[A-Za-z0-9_]{1,32}-h[12]$ ]] || die "rsh: '$n' is not one of these hosts"
    ip netns exec "$n" unshare --uts /bin/sh -c "hostname $n && $*"
    rc=$?
    # As over ssh, whose connection would run over the management link, the
    # daemon's exit is not reported while that link is down (mpirun then
    # learns of the lost host from its own keepalive, naming it, instead of
    # reading this early exit as a daemon that failed to start). The loop
    # ends when the link is up again or the namespace is gone.
    while ip -n "$n" -o link show clm0 2>/dev/null | grep -qv 'state UP'; do sleep 0.2; done
    exit $rc
    ;;
run)
    check_id "${1:-}"
    id=$1
    shift
    opts=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
    [ $# -gt 1 ] || die "run: expected ID [MPIRUN-OPTION...] -- CMD [ARG...]"
    shift
    hf="$(state "$id")/hostfile"
    [ -f "$hf" ] || die "run: hosts $id are not up (two_hosts.sh up $id)"
    n1=$(ns "$id" 1)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # the mpirun command line, quoted for the shell that sets the host name
    line=$(printf '%q ' mpirun --hostfile "$hf" -np 2 --map-by node \
        --mca plm_rsh_agent "$self rsh" --mca btl tcp,self \
        --mca btl_tcp_if_include "$DATA.0/30" --mca oob_tcp_if_include "$MGMT.0/30" \
        --mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 2 \
        --mca odls_base_sigkill_timeout 0 \
        "${opts[@]}" "$@")
    exec ip netns exec "$n1" unshare --uts /bin/sh -c "hostname $n1 && exec $line"
    ;;
*)
    sed -n '/^#   two_hosts/,/^#   two_hosts.sh rsh/p' "$0" | sed 's/^# *//' >&2
    exit 2
    ;;
esac
