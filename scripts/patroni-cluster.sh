#!/usr/bin/env bash
# A throwaway Patroni cluster on loopback: one etcd member and two Patroni nodes (Debian's `etcd-server` and
# `patroni`), each PostgreSQL in DIR, for the failover tests and for trying the runbook in docs/operations.md.
#   scripts/patroni-cluster.sh start DIR PG1 PG2 ETCD_CLIENT ETCD_PEER REST1 REST2 sync|async
#       -> prints the multi-host URL (target_session_attrs=read-write) once node1 leads and node2 streams
#   scripts/patroni-cluster.sh leader DIR       -> prints the leader's name (node1 or node2)
#   scripts/patroni-cluster.sh kill-leader DIR  -> kill -9 of the leader's Patroni and postmaster (the node dies)
#   scripts/patroni-cluster.sh stop DIR
# The timings are short so a failover takes seconds: the leader key lives ttl=10 s, Patroni loops every
# second. `sync` sets synchronous_mode (Patroni keeps the replica in synchronous_standby_names); `async`
# leaves it off. Loopback connections are trusted: for tests only.
set -euo pipefail
cmd=${1:?usage: patroni-cluster.sh start|leader|kill-leader|stop DIR ...}
dir=$(realpath -m "${2:?DIR}")
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# The leader as the etcd member knows it (Patroni's REST API answers 200 on /primary only at the leader).
leader() {
    for node in node1 node2; do
        [ -f "$dir/$node/rest" ] || continue
        if curl -fs -o /dev/null "http://127.0.0.1:$(cat "$dir/$node/rest")/primary"; then echo "$node"; return 0; fi
    done
    return 1
}

node_config() {
    local node=$1 pg=$2 rest=$3 etcd=$4 mode=$5
    cat <<EOF
scope: pushizo-test
name: $node
log:
  dir: $dir/$node
  level: INFO
restapi:
  listen: 127.0.0.1:$rest
  connect_address: 127.0.0.1:$rest
etcd3:
  hosts: 127.0.0.1:$etcd
watchdog:
  mode: off
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 1073741824
    synchronous_mode: $([ "$mode" = sync ] && echo true || echo false)
    postgresql:
      use_pg_rewind: false
      use_slots: true
      parameters:
        wal_level: replica
        max_wal_senders: 5
        max_replication_slots: 5
        hot_standby: "on"
        fsync: "off"
        full_page_writes: "off"
        max_connections: 200
        wal_sender_timeout: 10s
        wal_receiver_timeout: 10s
  initdb:
  - encoding: UTF8
  - locale: C.UTF-8
postgresql:
  listen: 127.0.0.1:$pg
  connect_address: 127.0.0.1:$pg
  data_dir: $dir/$node/data
  bin_dir: $bindir
  pgpass: $dir/$node/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
  parameters:
    unix_socket_directories: $dir/$node
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication replicator 127.0.0.1/32 trust
EOF
}

case "$cmd" in
start)
    pg1=${3:?PG1}; pg2=${4:?PG2}; etcd_client=${5:?ETCD_CLIENT}; etcd_peer=${6:?ETCD_PEER}
    rest1=${7:?REST1}; rest2=${8:?REST2}; mode=${9:?sync|async}
    mkdir -p "$dir/etcd" "$dir/node1" "$dir/node2"
    if [ "$(id -u)" = 0 ]; then
        chown postgres:postgres "$dir" "$dir/node1" "$dir/node2"
        p=$(dirname "$dir"); while [ "$p" != / ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
    fi
    etcd --name pushizo-test --data-dir "$dir/etcd/data" \
        --listen-client-urls "http://127.0.0.1:$etcd_client" --advertise-client-urls "http://127.0.0.1:$etcd_client" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-cluster "pushizo-test=http://127.0.0.1:$etcd_peer" >"$dir/etcd/etcd.log" 2>&1 &
    echo $! >"$dir/etcd/pid"
    for _ in $(seq 1 600); do
        curl -fs -o /dev/null "http://127.0.0.1:$etcd_client/health" && break
        sleep 0.1
    done
    curl -fs -o /dev/null "http://127.0.0.1:$etcd_client/health" || { tail -n 20 "$dir/etcd/etcd.log" >&2; exit 1; }
    start_node() {
        local node=$1 pg=$2 rest=$3
        node_config "$node" "$pg" "$rest" "$etcd_client" "$mode" >"$dir/$node/patroni.yml"
        chown postgres:postgres "$dir/$node/patroni.yml" 2>/dev/null || true
        echo "$rest" >"$dir/$node/rest"
        echo "$pg" >"$dir/$node/port"
        # setpriv execs (runuser would stay the parent): the pid kept is Patroni's own, for kill-leader.
        if [ "$(id -u)" = 0 ]; then
            HOME=$dir/$node setpriv --reuid=postgres --regid=postgres --init-groups \
                patroni "$dir/$node/patroni.yml" >"$dir/$node/patroni.out" 2>&1 &
        else
            patroni "$dir/$node/patroni.yml" >"$dir/$node/patroni.out" 2>&1 &
        fi
        echo $! >"$dir/$node/pid"
    }
    # node1 first, so it bootstraps the cluster and leads; node2 then clones it with pg_basebackup.
    start_node node1 "$pg1" "$rest1"
    for _ in $(seq 1 1200); do leader >/dev/null && break; sleep 0.1; done
    [ "$(leader || true)" = node1 ] || { echo "patroni-cluster: node1 never led" >&2; tail -n 30 "$dir/node1/patroni.out" >&2; exit 1; }
    start_node node2 "$pg2" "$rest2"
    # The replica streams (and, with `sync`, is the synchronous standby) before the database is created.
    want=streaming; [ "$mode" = sync ] && want=sync
    for _ in $(seq 1 1800); do
        state=$(as_pg psql -h 127.0.0.1 -p "$pg1" -U postgres -d postgres -Atqc \
            "SELECT CASE WHEN sync_state = 'sync' THEN 'sync' ELSE state END FROM pg_stat_replication" 2>/dev/null || true)
        [ "$state" = "$want" ] && break
        sleep 0.1
    done
    [ "$state" = "$want" ] || { echo "patroni-cluster: node2 never became $want" >&2; tail -n 30 "$dir/node2/patroni.out" >&2; exit 1; }
    as_pg psql -h 127.0.0.1 -p "$pg1" -U postgres -d postgres -qc "CREATE DATABASE pushizo" >/dev/null
    echo "postgresql://postgres@127.0.0.1:$pg1,127.0.0.1:$pg2/pushizo?target_session_attrs=read-write"
    ;;
leader)
    leader
    ;;
kill-leader)
    node=$(leader)
    postmaster=$(head -n 1 "$dir/$node/data/postmaster.pid")
    ps -o pid= --ppid "$postmaster" >"$dir/$node/children" || true
    # The whole node at once: Patroni first, so it cannot restart its PostgreSQL.
    kill -9 "$(cat "$dir/$node/pid")" "$postmaster"
    echo "$node"
    ;;
stop)
    for node in node1 node2; do
        [ -f "$dir/$node/pid" ] && kill -9 "$(cat "$dir/$node/pid")" 2>/dev/null || true
        if [ -f "$dir/$node/data/postmaster.pid" ]; then
            as_pg "$bindir/pg_ctl" -D "$dir/$node/data" -m immediate -w stop >/dev/null 2>&1 || true
        fi
        if [ -f "$dir/$node/children" ]; then
            for child in $(cat "$dir/$node/children"); do kill -9 "$child" 2>/dev/null || true; done
        fi
    done
    [ -f "$dir/etcd/pid" ] && kill "$(cat "$dir/etcd/pid")" 2>/dev/null || true
    ;;
*)
    echo "usage: patroni-cluster.sh start DIR PG1 PG2 ETCD_CLIENT ETCD_PEER REST1 REST2 sync|async | leader DIR | kill-leader DIR | stop DIR" >&2
    exit 2 ;;
esac
