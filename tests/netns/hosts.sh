#!/bin/sh
# Hosts made on this machine for multi-host MPI: network namespaces, each
# with its own address, joined by veth links to one bridge, so Open MPI
# runs across them over real TCP (btl tcp) as across machines.  Needs root
# (CAP_NET_ADMIN); says why and exits 77 where namespaces cannot be made.
#
#   hosts.sh up DIR N   make hosts 0..N-1; DIR receives hostfile, agent
#                       (Open MPI's launcher: enters the host's namespace
#                       and UTS namespace instead of ssh), mpirun (the
#                       command line, run from host 0) and the names
#   hosts.sh down DIR   remove what `up DIR` made (idempotent)
#   hosts.sh link DIR I up|down     cut or restore host I's link
#   hosts.sh rate DIR I RATE|off    limit host I's egress (tc tbf), e.g. 100mbit
#   hosts.sh pids DIR I             the pids running in host I
#
# Host I is namespace <tag>hI with address 10.231.<net>.(I+1)/24 on veth
# <tag>vI, its peer <tag>bI on bridge <tag>br; <tag> and <net> come from
# DIR so that two runs side by side do not collide.
set -eu

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || {
    echo "usage: hosts.sh up|down|link|rate|pids DIR ..." >&2
    exit 2
}

# A short tag and subnet from DIR (interface names are at most 15 bytes).
sum=$(printf '%s' "$dir" | cksum | cut -d' ' -f1)
tag=cl$((sum % 10000))
net=$((sum % 200 + 20))

skip() {
    echo "multi-host: skipped: $*" >&2
    exit 77
}

case "$cmd" in
up)
    n=${3:-2}
    [ "$(id -u)" = 0 ] || skip "network namespaces need root"
    command -v ip >/dev/null || skip "no ip(8) (iproute2)"
    mkdir -p "$dir"
    "$0" down "$dir" 2>/dev/null || true
    ip link add "${tag}br" type bridge 2>/dev/null ||
        skip "cannot create a bridge here (no CAP_NET_ADMIN?)"
    ip link set "${tag}br" up
    : >"$dir/hostfile"
    : >"$dir/names"
    i=0
    while [ "$i" -lt "$n" ]; do
        ns="${tag}h$i"
        addr="10.231.$net.$((i + 1))"
        ip netns add "$ns" || skip "cannot create network namespace $ns"
        ip link add "${tag}v$i" type veth peer name "${tag}b$i"
        ip link set "${tag}v$i" netns "$ns"
        ip link set "${tag}b$i" master "${tag}br" up
        ip netns exec "$ns" ip addr add "$addr/24" dev "${tag}v$i"
        ip netns exec "$ns" ip link set "${tag}v$i" up
        ip netns exec "$ns" ip link set lo up
        # TCP gives up on a silent peer after 5 retransmissions (about 6
        # s) instead of Linux's default 15 (about 15 min): without it a
        # cut link leaves mpirun waiting for the lost host's daemon that
        # long after the ranks have ended (docs/distributed.md).
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=5
        echo "$addr slots=1" >>"$dir/hostfile"
        echo "$addr $ns host$i" >>"$dir/names"
        i=$((i + 1))
    done
    # Open MPI calls the agent as ssh: agent HOST COMMAND...; the command
    # runs in the host's namespaces, with the host's name as hostname.
    cat >"$dir/agent" <<EOF
#!/bin/sh
host=\$1
shift
line=\$(grep "^\$host " "$dir/names") || { echo "agent: unknown host \$host" >&2; exit 1; }
set -- "\$@"
ns=\$(echo "\$line" | cut -d' ' -f2)
name=\$(echo "\$line" | cut -d' ' -f3)
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$name; \$*"
EOF
    chmod +x "$dir/agent"
    # Traffic only over the bridge: TCP for both MPI messages and Open
    # MPI's own out-of-band wiring, no shared memory (every host sees the
    # same /dev/shm here, which real hosts do not).
    cat >"$dir/mpirun" <<EOF
#!/bin/sh
exec ip netns exec ${tag}h0 unshare --uts /bin/sh -c 'hostname host0; exec mpirun --allow-run-as-root --hostfile "$dir/hostfile" --mca plm_rsh_agent "$dir/agent" --mca btl tcp,self --mca btl_tcp_if_include 10.231.$net.0/24 --mca oob_tcp_if_include 10.231.$net.0/24 --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 --mca orte_tmpdir_base "$dir" --bind-to none "\$@"' mpirun "\$@"
EOF
    chmod +x "$dir/mpirun"
    ;;
down)
    for ns in $(ip netns list 2>/dev/null | cut -d' ' -f1 | grep "^${tag}h" || true); do
        for p in $(ip netns pids "$ns" 2>/dev/null); do
            kill -9 "$p" 2>/dev/null || true
        done
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "${tag}br" 2>/dev/null || true
    for l in $(ip -o link show 2>/dev/null | sed -n "s/^[0-9]*: \(${tag}b[0-9]*\)@.*/\1/p"); do
        ip link del "$l" 2>/dev/null || true
    done
    ;;
link)
    ip link set "${tag}b$3" "$4"
    ;;
rate)
    if [ "$4" = off ]; then
        ip netns exec "${tag}h$3" tc qdisc del dev "${tag}v$3" root 2>/dev/null || true
    else
        ip netns exec "${tag}h$3" tc qdisc replace dev "${tag}v$3" root \
            tbf rate "$4" burst 64kb latency 50ms
    fi
    ;;
pids)
    ip netns pids "${tag}h$3"
    ;;
*)
    echo "hosts.sh: unknown command $cmd" >&2
    exit 2
    ;;
esac
