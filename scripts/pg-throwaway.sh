#!/usr/bin/env bash
# A throwaway PostgreSQL cluster in a project-local directory, for `make demo`, `make test` and development.
#   scripts/pg-throwaway.sh start DIR PORT   -> prints the connection string
#   scripts/pg-throwaway.sh stop DIR
# PUSHIZO_TEST_PG_OPTIONS: more server options for `start`, after the defaults (a later -c wins), e.g. the Citus
# nodes' shared_preload_libraries and loopback listen address (scripts/citus-cluster.sh).
# initdb refuses to run as root, so the cluster belongs to the unprivileged `postgres` system user (created
# by Debian's postgresql package); every parent of DIR must be traversable by that user.
set -euo pipefail
cmd=${1:?usage: pg-throwaway.sh start|stop DIR [PORT]}
dir=$(realpath -m "${2:?DIR}")
port=${3:-54329}
bindir=$(pg_config --bindir 2>/dev/null || true)
if [ ! -x "$bindir/initdb" ]; then
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fi
[ -x "$bindir/initdb" ] || { echo "pg-throwaway: initdb not found; install the postgresql package" >&2; exit 1; }

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Unix-socket paths are limited to about 107 bytes: a deep checkout puts the socket in /tmp instead.
sockdir=$dir
if [ ${#sockdir} -gt 80 ]; then sockdir=/tmp/pushizo-pg-$port; fi

case "$cmd" in
start)
    mkdir -p "$sockdir"
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres:postgres "$dir" "$sockdir"
        # Let the postgres user reach DIR through its parents (o+x only: traverse, not list).
        p=$(dirname "$dir"); while [ "$p" != / ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_pg "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
            || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    # max_connections: the test suite runs its fleet suites side by side (six and four worker processes of
    # 5 connections each, plus every suite's own pools); 200 ran out.
    if ! as_pg "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
            -o "-k $sockdir -p $port -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=500 ${PUSHIZO_TEST_PG_OPTIONS:-}" \
            start >/dev/null || { tail -n 30 "$dir/postgres.log" >&2; exit 1; }
    fi
    as_pg "$bindir/psql" -h "$sockdir" -p "$port" -U postgres -d postgres -Atqc \
        "SELECT 1 FROM pg_database WHERE datname = 'pushizo'" | grep -q 1 \
        || as_pg "$bindir/psql" -h "$sockdir" -p "$port" -U postgres -d postgres -qc "CREATE DATABASE pushizo" >/dev/null
    echo "host=$sockdir port=$port user=postgres dbname=pushizo"
    ;;
stop)
    if [ -f "$dir/data/PG_VERSION" ]; then
        as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    ;;
*)
    echo "usage: pg-throwaway.sh start DIR [PORT] | stop DIR" >&2; exit 2 ;;
esac
