#!/usr/bin/env bash
# All-reduce times between "hosts" on one machine (scripts/netns_hosts.sh: network namespaces,
# veth links to a bridge, Open MPI over TCP), for the model in docs/parallel.md:
#
#   bash bench/allreduce_hosts.sh [BUILD_DIR] [RANKS...]      # default: build, 2 3
#
# For each number of ranks, `loom_bench_parallel allreduce` (4 KiB to 64 MiB, Float32; MPI's own
# all-reduce, loom's bucketed path and its deterministic one) twice: on the links as they are,
# and on links shaped to 1 Gbit/s (a tc token bucket on both ends of every link). Root and
# iproute2.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
shift || true
ranks=("${@:-2 3}")
# shellcheck source=../scripts/netns_hosts.sh
source "$root/scripts/netns_hosts.sh"
trap netns_hosts_down EXIT
bench=$(readlink -f "$build/bin/loom_bench_parallel")
echo "allreduce_hosts: $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores, Open MPI $(ompi_info --version 2>/dev/null | head -1 | awk '{print $NF}')"
for n in ${ranks[@]}; do
  for shape in "" 1gbit; do
    netns_hosts_up "$n" $shape
    echo "== $n hosts, links ${shape:-as they are (veth)}"
    # ranks may outnumber the cores: waiting ranks yield the processor
    netns_on_host0 "${NETNS_MPIRUN[@]}" -np "$n" --mca mpi_yield_when_idle 1 -x LOOM_NUM_THREADS=1 \
      "$bench" allreduce
    netns_hosts_down
  done
done
