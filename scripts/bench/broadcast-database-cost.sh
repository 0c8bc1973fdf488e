#!/usr/bin/env bash
# The database's CPU per broadcast delivery against the floor, as `make bench` section 2 measures it, without the
# rest of the bench, for one or more builds in the same session: section 2's workload (PUSHIZO_BENCH_DELIVERIES,
# default 100,000: 1,000 listed subscriptions per notification, three languages) drained by one
# `pushizo-worker run --exit-when-drained` against the APNs emulator (TLS) on a throwaway PostgreSQL, then the
# floor (scripts/bench/event-floor.pgbench: the same deliveries' events alone, in batches of the worker's mean
# completion batch). Each run prints PostgreSQL's CPU per delivery (postmaster and children, live and reaped),
# the worker's own CPU per delivery, the floor and the ratio. The builds take turns, ROUNDS times (default 2);
# the last round of each build runs with pg_stat_statements and pg_stat_kcache counting every statement and
# prints its table (as section 2's statements run: CPU of execution and planning, per row and per delivery).
#   scripts/bench/broadcast-database-cost.sh BINDIR [BINDIR...]
# PUSHIZO_BENCH_COST_ROUNDS (default 2), PUSHIZO_BENCH_STATEMENTS (rows of each table, default 20),
# PUSHIZO_BENCH_COST_PG_PORT (default 55438).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
[ $# -ge 1 ] || { echo "usage: $0 BINDIR [BINDIR...]" >&2; exit 2; }
deliveries=${PUSHIZO_BENCH_DELIVERIES:-100000}
rounds=${PUSHIZO_BENCH_COST_ROUNDS:-2}
pg_port=${PUSHIZO_BENCH_COST_PG_PORT:-55438}
work=$root/var/bench-db-cost-$pg_port
rm -rf "$work"; mkdir -p "$work"
bindir=$1  # migrations and the emulator: the first build's
pgbin=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
emulator_pid=
cleanup() {
    [ -n "$emulator_pid" ] && { kill "$emulator_pid" 2>/dev/null || true; wait "$emulator_pid" 2>/dev/null || true; }
    scripts/pg-throwaway.sh stop "$work/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT
calc() { awk "BEGIN { printf \"%.4f\", $1 }"; }

. scripts/bench/common.sh
bench_database "$pg_port"
bench_statements_enable "$pg_port"
bench_emulator emulator
bench_apns_app 00000000-0000-4000-8000-0000000be4c0 emulator
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$deliveries" <<'SQL'
INSERT INTO subscriptions (app_id, platform, token, language)
SELECT '00000000-0000-4000-8000-0000000be4c0', 'ios', 'a0' || md5(n::text) || substr(md5('b' || n), 1, 30),
       (ARRAY['en', 'tr', 'de'])[1 + n % 3]
FROM generate_series(1, :n) n;
SQL
clock_ticks=$(getconf CLK_TCK)
postmaster=$(head -n 1 "$work/pg/data/postmaster.pid")
# No client backend left (scripts/bench.sh's pg_clients_gone): a backend's CPU lands in the postmaster's reaped
# children's count only once it is reaped.
pg_clients_gone() {
    local child command busy
    for _ in $(seq 1 500); do
        busy=0
        for child in $(pgrep -P "$postmaster"); do
            command=$( (tr '\0' ' ' <"/proc/$child/cmdline") 2>/dev/null || true)
            case $command in "" | *"[local]"* | *"127.0.0.1"*) busy=1 ;; esac
        done
        [ "$busy" = 0 ] && return 0
        sleep 0.01
    done
}
TIMEFORMAT='%U %S'

# One drain by the build in $1, then the floor; $2 non-empty: statements counted. Prints one line.
drain() {
    local bin=$1 statements=${2:-} pg0 pg1 worker_cpu sent batch pg_us worker_us floor_us batches
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 <<'SQL'
TRUNCATE delivery_events;
DELETE FROM notifications;
VACUUM ANALYZE deliveries;
VACUUM notifications;
INSERT INTO notifications (app_id, message, target)
SELECT '00000000-0000-4000-8000-0000000be4c0',
       '{"headings": {"en": "Bench", "tr": "Ölçüm"}, "contents": {"en": "A notification of ordinary size for a benchmark run", "tr": "Sıradan boyutta bir bildirim"}, "data": {"k": "v"}}',
       jsonb_build_object('include_subscription_ids', jsonb_agg(id))
FROM (SELECT id, (row_number() OVER (ORDER BY id) - 1) / 1000 AS chunk FROM subscriptions) s GROUP BY chunk;
SQL
    if [ -n "$statements" ]; then bench_statements_reset; fi
    pg_clients_gone; pg0=$(pg_ticks)
    worker_cpu=$( { time env PUSHIZO_CA_FILE="$work/tls/ca.pem" PUSHIZO_POLL_INTERVAL=0.05 PUSHIZO_ALLOW_PRIVATE_NETWORKS=true \
        "$bin/pushizo-worker" run --exit-when-drained 2>"$work/worker.log"; } 2>&1 )
    pg_clients_gone; pg1=$(pg_ticks)
    if [ -n "$statements" ]; then bench_statements_snapshot bench_statements; fi
    sent=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM delivery_events WHERE event = 'sent'")
    batch=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT round(count(*)::numeric / greatest(count(DISTINCT at), 1)) FROM delivery_events")
    pg_us=$(calc "($pg1 - $pg0) * 1000000 / $clock_ticks / ($sent + ($sent == 0))")
    worker_us=$(calc "($(tr ' ' + <<<"$worker_cpu")) * 1000000 / ($sent + ($sent == 0))")
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v batch="$batch" -f scripts/bench/event-floor-batches.sql
    batches=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM event_floor_batches")
    pg_clients_gone; pg0=$(pg_ticks)
    "$pgbin/pgbench" -n -M prepared -c 1 -j 1 -t "$batches" -f scripts/bench/event-floor.pgbench "$PUSHIZO_DATABASE_URL" >/dev/null 2>&1
    pg_clients_gone; pg1=$(pg_ticks)
    floor_us=$(calc "($pg1 - $pg0) * 1000000 / $clock_ticks / $deliveries")
    printf '    %s%s: %s sent; CPU a delivery: PostgreSQL %.1f µs = %.2fx the floor of %.1f µs (batches of %s), the worker %.1f µs (load %s)\n' \
        "$bin" "${statements:+ (statements counted)}" "$sent" "$pg_us" "$(calc "$pg_us / $floor_us")" "$floor_us" "$batch" "$worker_us" \
        "$(cut -d' ' -f1-3 /proc/loadavg)"
    if [ -n "$statements" ]; then
        bench_statements_table bench_statements "$sent" "${PUSHIZO_BENCH_STATEMENTS:-20}" | sed 's/^/    /'
    fi
}

echo "==> $deliveries broadcast deliveries, builds: $*"
for round in $(seq 1 "$rounds"); do
    for bin in "$@"; do
        if [ "$round" = "$rounds" ]; then drain "$bin" counted; else drain "$bin"; fi
    done
done
