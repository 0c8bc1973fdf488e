#!/usr/bin/env bash
# A throwaway Citus cluster on loopback: a coordinator and two worker nodes, each a PostgreSQL 15 in DIR (started
# by scripts/pg-throwaway.sh, so as the `postgres` user when run as root) with Citus preloaded. Needs Citus
# installed (scripts/citus-build.sh). Loopback connections are trusted: for tests and trials only.
#   scripts/citus-cluster.sh start DIR BASEPORT [DATABASE]
#       -> coordinator on BASEPORT, worker nodes on BASEPORT+1 and +2; DATABASE (default $PUSHIZO_TEST_CITUS_DATABASE,
#          else pushizo) has the citus extension on every node and knows the coordinator and both workers;
#          prints the coordinator's connection string
#   scripts/citus-cluster.sh add-node DIR       -> a third worker node on BASEPORT+3, added to DATABASE
#   scripts/citus-cluster.sh status DIR         -> one line per node; exit status 1 unless every node runs
#   scripts/citus-cluster.sh stop DIR
#   scripts/citus-cluster.sh urls DIR           -> the coordinator's connection string, then each worker node's
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:?usage: citus-cluster.sh start|add-node|status|stop|urls DIR [BASEPORT] [DATABASE]}
dir=$(realpath -m "${2:?DIR}")
bindir=$(ls -d /usr/lib/postgresql/15/bin 2>/dev/null || true)
[ -x "$bindir/psql" ] || { echo "citus-cluster: PostgreSQL 15 not found (Citus 13 is built for it)" >&2; exit 1; }

# Each node: loopback TCP (the coordinator reaches the workers as 127.0.0.1:PORT, as clients do), Citus preloaded.
# wal_level=logical: shard moves (citus_rebalance_start, citus_move_shard_placement) copy through logical
# replication. citus.enable_statistics_collection=off: Citus otherwise reports usage to citusdata.com, and tests
# send traffic only to loopback. citus.node_connection_timeout=300000 (ms; Citus's default is 30 s): on two cores
# busy with the rest of the suite a coordinator's connection to a worker node has taken longer, and
# create_distributed_table then failed with "failure on connection marked as essential".
export PUSHIZO_TEST_PG_OPTIONS="-c listen_addresses=127.0.0.1 -c shared_preload_libraries=citus -c max_connections=300 \
-c wal_level=logical -c max_replication_slots=10 -c max_wal_senders=10 -c citus.enable_statistics_collection=off \
-c citus.node_connection_timeout=300000"

sql() { # PORT DATABASE STATEMENT -> its rows, unaligned
    PGOPTIONS="-c client_min_messages=warning" "$bindir/psql" -h 127.0.0.1 -p "$1" -U postgres -d "$2" -v ON_ERROR_STOP=1 -Atqc "$3"
}

# Starts node NAME on PORT and makes DATABASE with the citus extension there.
start_node() {
    local name=$1 port=$2 database=$3
    scripts/pg-throwaway.sh start "$dir/$name" "$port" >/dev/null
    echo "$port" >"$dir/$name/port"
    sql "$port" postgres "SELECT 1 FROM pg_database WHERE datname = '$database'" | grep -q 1 \
        || sql "$port" postgres "CREATE DATABASE \"$database\"" >/dev/null
    sql "$port" "$database" "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
}

# Adds the worker node on PORT to the coordinator's metadata of DATABASE, once.
add_worker() {
    local port=$1 database=$2 coordinator
    coordinator=$(cat "$dir/coordinator/port")
    sql "$coordinator" "$database" "SELECT 1 FROM pg_dist_node WHERE nodename = '127.0.0.1' AND nodeport = $port" \
        | grep -q 1 || sql "$coordinator" "$database" "SELECT citus_add_node('127.0.0.1', $port)" >/dev/null
}

url() { echo "host=127.0.0.1 port=$(cat "$dir/$1/port") user=postgres dbname=$(cat "$dir/database")"; }

nodes() { for name in coordinator worker1 worker2 worker3; do [ -f "$dir/$name/port" ] && echo "$name"; done; true; }

case "$cmd" in
start)
    base=${3:?BASEPORT}
    database=${4:-${PUSHIZO_TEST_CITUS_DATABASE:-pushizo}}
    mkdir -p "$dir"
    echo "$database" >"$dir/database"
    start_node coordinator "$base" "$database"
    start_node worker1 $((base + 1)) "$database"
    start_node worker2 $((base + 2)) "$database"
    # A node added before a stop is in the metadata: started again with the others.
    if [ -f "$dir/worker3/port" ]; then start_node worker3 $((base + 3)) "$database"; fi
    sql "$base" "$database" "SELECT citus_set_coordinator_host('127.0.0.1', $base)" >/dev/null
    add_worker $((base + 1)) "$database"
    add_worker $((base + 2)) "$database"
    url coordinator
    ;;
add-node)
    [ -f "$dir/coordinator/port" ] || { echo "citus-cluster: no cluster in $dir" >&2; exit 1; }
    port=$(($(cat "$dir/coordinator/port") + 3))
    start_node worker3 "$port" "$(cat "$dir/database")"
    add_worker "$port" "$(cat "$dir/database")"
    url worker3
    ;;
status)
    running=0
    for name in $(nodes); do
        if sql "$(cat "$dir/$name/port")" postgres "SELECT 1" >/dev/null 2>&1; then
            echo "$name 127.0.0.1:$(cat "$dir/$name/port") running"
        else
            echo "$name 127.0.0.1:$(cat "$dir/$name/port") stopped"; running=1
        fi
    done
    [ -n "$(nodes)" ] || { echo "citus-cluster: no cluster in $dir"; running=1; }
    exit "$running"
    ;;
urls)
    for name in $(nodes); do url "$name"; done
    ;;
stop)
    for name in $(nodes); do scripts/pg-throwaway.sh stop "$dir/$name"; done
    ;;
*)
    echo "usage: citus-cluster.sh start DIR BASEPORT [DATABASE] | add-node DIR | status DIR | stop DIR | urls DIR" >&2
    exit 2 ;;
esac
