# Several "hosts" on one machine for mpirun over TCP: sourced by tests/parallel/netns_hosts_test.sh
# and bench/allreduce_hosts.sh (root and Debian's iproute2; docs/parallel.md).
#
#   source scripts/netns_hosts.sh
#   netns_hosts_up 3 [RATE]        # hosts 0..2: namespaces with addresses 10.77.0.1-3/24, each
#                                  # with one veth link to a bridge in a fourth namespace (the
#                                  # switch); RATE (tc's "1gbit") shapes every link in both
#                                  # directions (a token bucket; omitted: the veth's own speed)
#   netns_on_host0 "${NETNS_MPIRUN[@]}" -np 3 PROGRAM ARGS...   # mpirun on host 0, over TCP
#   netns_link_down 2              # takes host 2's link down at the switch (netns_link_up: back)
#   netns_hosts_down               # kills what runs inside, removes the namespaces (also on EXIT
#                                  # when the caller's trap calls it)
#
# Each host has its own hostname (host0, host1, ...: a UTS namespace). mpirun reaches the other
# hosts through an rsh agent that enters their namespaces, what ssh does between real hosts; Open
# MPI's TCP transport carries both the job's control (oob_tcp_if_include) and the ranks' messages
# (btl self,tcp and btl_tcp_if_include), and mpirun notices a host it lost within about 13 s:
# TCP keepalives on its idle control connections (oob_tcp_keepalive_time 5, intvl 2, probes 3;
# Open MPI's default waits 300 s of idleness first) and, on a connection with data in flight,
# the kernel's retransmission limit (net.ipv4.tcp_retries2=5 in each host's namespace; the
# default 15 takes about 15 minutes).
# netns_hosts_up returns 77 (with the reason on stderr) where namespaces cannot be made.

NETNS_TAG=lm$$  # interface names are at most 15 characters
NETNS_SWITCH=${NETNS_TAG}sw
NETNS_HOSTS=()
NETNS_DIR=
NETNS_MPIRUN=()

netns_hosts_up() {
  local n=$1 rate=${2:-} i err
  [[ $(id -u) == 0 ]] || { echo "network namespaces need root" >&2; return 77; }
  command -v ip >/dev/null || { echo "no ip command (Debian's iproute2)" >&2; return 77; }
  command -v unshare >/dev/null || { echo "no unshare command (util-linux)" >&2; return 77; }
  if [[ -n $rate ]] && ! command -v tc >/dev/null; then
    echo "no tc command (Debian's iproute2)" >&2
    return 77
  fi
  NETNS_DIR=$(mktemp -d)
  if ! err=$(ip netns add "$NETNS_SWITCH" 2>&1); then
    echo "cannot make a network namespace: $err" >&2
    return 77
  fi
  ip -n "$NETNS_SWITCH" link add br0 type bridge
  ip -n "$NETNS_SWITCH" link set br0 up
  for ((i = 0; i < n; ++i)); do
    NETNS_HOSTS+=("${NETNS_TAG}h$i")
    ip netns add "${NETNS_HOSTS[$i]}"
    ip link add "${NETNS_TAG}e$i" type veth peer name "${NETNS_TAG}p$i"
    ip link set "${NETNS_TAG}e$i" netns "${NETNS_HOSTS[$i]}"
    ip link set "${NETNS_TAG}p$i" netns "$NETNS_SWITCH"
    ip -n "$NETNS_SWITCH" link set "${NETNS_TAG}p$i" master br0 up
    ip -n "${NETNS_HOSTS[$i]}" addr add "10.77.0.$((i + 1))/24" dev "${NETNS_TAG}e$i"
    ip -n "${NETNS_HOSTS[$i]}" link set "${NETNS_TAG}e$i" up
    ip -n "${NETNS_HOSTS[$i]}" link set lo up
    # A connection with data in flight to a lost host fails after 5 retransmissions (about 13 s)
    # instead of the kernel's default 15 (about 15 minutes): mpirun's orders to a lost daemon.
    ip netns exec "${NETNS_HOSTS[$i]}" sysctl -qw net.ipv4.tcp_retries2=5
    if [[ -n $rate ]]; then
      # A token bucket on what leaves each end: host -> switch and switch -> host.
      ip netns exec "${NETNS_HOSTS[$i]}" tc qdisc add dev "${NETNS_TAG}e$i" root tbf \
        rate "$rate" burst 64kb latency 100ms
      ip netns exec "$NETNS_SWITCH" tc qdisc add dev "${NETNS_TAG}p$i" root tbf \
        rate "$rate" burst 64kb latency 100ms
    fi
    printf '10.77.0.%d slots=1\n' $((i + 1)) >>"$NETNS_DIR/hostfile"
  done
  # The rsh agent: "agent HOST COMMAND..." runs COMMAND (a shell command line, as ssh passes it)
  # on HOST: inside its namespace, under its hostname.
  {
    echo '#!/bin/sh'
    echo 'host=$1; shift'
    echo 'case $host in'
    for ((i = 0; i < n; ++i)); do
      echo "  10.77.0.$((i + 1))) ns=${NETNS_HOSTS[$i]} name=host$i ;;"
    done
    echo '  *) echo "rsh: unknown host $host" >&2; exit 255 ;;'
    echo 'esac'
    echo 'exec ip netns exec $ns unshare --uts sh -c "hostname $name; $*"'
  } >"$NETNS_DIR/rsh"
  chmod +x "$NETNS_DIR/rsh"
  NETNS_MPIRUN=(mpirun --allow-run-as-root --hostfile "$NETNS_DIR/hostfile" --bind-to none
                --mca plm_rsh_agent "$NETNS_DIR/rsh" --mca btl self,tcp
                --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24
                --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2
                --mca oob_tcp_keepalive_probes 3 --mca orte_base_help_aggregate 0)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  unset OMPI_MCA_btl
}

# Runs a command on host 0 (its namespace, its hostname).
netns_on_host0() {
  ip netns exec "${NETNS_HOSTS[0]}" unshare --uts sh -c 'hostname host0; exec "$@"' sh "$@"
}

netns_link_down() {
  ip -n "$NETNS_SWITCH" link set "${NETNS_TAG}p$1" down
}
# Brings host N's link back as a restarted host's: what still ran inside it is killed, every
# host's neighbour table is flushed, and it returns once host N reaches host 0 over TCP (up to
# 20 s; 1 if it does not).
netns_link_up() {
  local i=$1 ns
  ip netns pids "${NETNS_HOSTS[$i]}" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip -n "$NETNS_SWITCH" link set "${NETNS_TAG}p$i" up
  for ns in "${NETNS_HOSTS[@]}"; do ip -n "$ns" neigh flush all 2>/dev/null; done
  ip netns exec "${NETNS_HOSTS[$i]}" python3 - <<'PY'
import socket, sys, time
deadline = time.time() + 20
while time.time() < deadline:
    try:
        socket.create_connection(("10.77.0.1", 9), timeout=1).close()
    except ConnectionRefusedError:
        sys.exit(0)  # host 0 answered (nothing listens on port 9 there: a refusal is an answer)
    except OSError:
        time.sleep(0.2)
        continue
    sys.exit(0)
sys.exit(1)
PY
}

netns_hosts_down() {
  local ns
  for ns in "${NETNS_HOSTS[@]}" "$NETNS_SWITCH"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  [[ -n $NETNS_DIR ]] && rm -rf "$NETNS_DIR"
  NETNS_HOSTS=()
  return 0
}
