#!/usr/bin/env bash
# A throwaway primary and streaming standby on loopback, for the failover tests and for trying the runbook in
# docs/operations.md by hand.
#   scripts/pg-replicated.sh start DIR PRIMARY_PORT STANDBY_PORT sync|async
#       -> prints the multi-host URL libpq fails over with (target_session_attrs=read-write)
#   scripts/pg-replicated.sh kill-primary DIR   kill -9 of the primary's postmaster (its backends exit on their own)
#   scripts/pg-replicated.sh promote DIR        pg_ctl promote of the standby; returns once it takes writes
#   scripts/pg-replicated.sh stop DIR
# The standby is a pg_basebackup of the primary (-R: standby.signal and primary_conninfo), streaming as the
# `replicator` role. `sync` names it in synchronous_standby_names, so a commit returns only once the standby
# has its WAL; `async` leaves commits that did not reach the standby yet to be lost with the primary.
# Both clusters belong to the unprivileged `postgres` user (initdb refuses root), authenticate loopback
# connections with `trust` and are not for anything but tests.
set -euo pipefail
cmd=${1:?usage: pg-replicated.sh start|kill-primary|promote|stop DIR ...}
dir=$(realpath -m "${2:?DIR}")
bindir=$(pg_config --bindir 2>/dev/null || true)
if [ ! -x "$bindir/initdb" ]; then
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fi
[ -x "$bindir/initdb" ] || { echo "pg-replicated: initdb not found; install the postgresql package" >&2; exit 1; }

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Options both servers run with: loopback TCP only, sockets in DIR, and what streaming replication needs.
# fsync=off is safe here: kill -9 of a postmaster loses no page the kernel already holds.
server_options() {
    local port=$1 sockdir=$2
    echo "-k $sockdir -p $port -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200 -c wal_level=replica -c max_wal_senders=5 -c hot_standby=on -c wal_sender_timeout=10s -c wal_receiver_timeout=10s"
}

case "$cmd" in
start)
    primary_port=${3:?PRIMARY_PORT}
    standby_port=${4:?STANDBY_PORT}
    mode=${5:?sync|async}
    case "$mode" in sync) names="'*'" ;; async) names="''" ;; *) echo "pg-replicated: mode is sync or async" >&2; exit 2 ;; esac
    mkdir -p "$dir/primary" "$dir/standby"
    if [ "$(id -u)" = 0 ]; then
        chown postgres:postgres "$dir" "$dir/primary" "$dir/standby"
        p=$(dirname "$dir"); while [ "$p" != / ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
    fi
    as_pg "$bindir/initdb" -D "$dir/primary/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$dir/primary/initdb.log" 2>&1 \
        || { cat "$dir/primary/initdb.log" >&2; exit 1; }
    # The default pg_hba.conf already trusts replication connections from 127.0.0.1; the role is named so
    # pg_stat_replication shows who streams.
    as_pg "$bindir/pg_ctl" -D "$dir/primary/data" -l "$dir/primary/postgres.log" -w -t 60 \
        -o "$(server_options "$primary_port" "$dir/primary") -c synchronous_commit=on" \
        start >/dev/null || { tail -n 30 "$dir/primary/postgres.log" >&2; exit 1; }
    as_pg "$bindir/psql" -h "$dir/primary" -p "$primary_port" -U postgres -d postgres -qc \
        "CREATE ROLE replicator REPLICATION LOGIN" >/dev/null
    as_pg "$bindir/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U replicator -D "$dir/standby/data" \
        -R -X stream -c fast >"$dir/standby/basebackup.log" 2>&1 || { cat "$dir/standby/basebackup.log" >&2; exit 1; }
    as_pg "$bindir/pg_ctl" -D "$dir/standby/data" -l "$dir/standby/postgres.log" -w -t 60 \
        -o "$(server_options "$standby_port" "$dir/standby") -c synchronous_commit=on" \
        start >/dev/null || { tail -n 30 "$dir/standby/postgres.log" >&2; exit 1; }
    # Synchronous only once the standby streams (a commit before would wait for it forever); the database is
    # created after, so with `sync` the CREATE itself waits for the standby.
    for _ in $(seq 1 600); do
        state=$(as_pg "$bindir/psql" -h "$dir/primary" -p "$primary_port" -U postgres -d postgres -Atqc \
            "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'" || true)
        [ -n "$state" ] && break
        sleep 0.1
    done
    [ -n "$state" ] || { echo "pg-replicated: the standby never streamed" >&2; tail -n 30 "$dir/standby/postgres.log" >&2; exit 1; }
    as_pg "$bindir/psql" -h "$dir/primary" -p "$primary_port" -U postgres -d postgres -qc \
        "ALTER SYSTEM SET synchronous_standby_names = $names" -c "SELECT pg_reload_conf()" >/dev/null
    as_pg "$bindir/psql" -h "$dir/primary" -p "$primary_port" -U postgres -d postgres -qc "CREATE DATABASE pushizo" >/dev/null
    echo "$primary_port $standby_port" >"$dir/ports"
    echo "postgresql://postgres@127.0.0.1:$primary_port,127.0.0.1:$standby_port/pushizo?target_session_attrs=read-write"
    ;;
kill-primary)
    pid=$(head -n 1 "$dir/primary/data/postmaster.pid")
    # Its children, remembered so `stop` can make sure none outlives the test.
    ps -o pid= --ppid "$pid" >"$dir/primary/children" || true
    kill -9 "$pid"
    ;;
promote)
    as_pg "$bindir/pg_ctl" -D "$dir/standby/data" -w -t 120 promote >/dev/null
    ;;
stop)
    for node in standby primary; do
        if [ -f "$dir/$node/data/postmaster.pid" ]; then
            as_pg "$bindir/pg_ctl" -D "$dir/$node/data" -m immediate -w stop >/dev/null 2>&1 || true
        fi
    done
    if [ -f "$dir/primary/children" ]; then
        for child in $(cat "$dir/primary/children"); do kill -9 "$child" 2>/dev/null || true; done
    fi
    ;;
*)
    echo "usage: pg-replicated.sh start DIR PRIMARY_PORT STANDBY_PORT sync|async | kill-primary DIR | promote DIR | stop DIR" >&2
    exit 2 ;;
esac
