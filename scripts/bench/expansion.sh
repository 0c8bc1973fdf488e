#!/usr/bin/env bash
# Section 3 of scripts/bench.sh alone: the expansion of PUSHIZO_BENCH_EXPANSION subscriptions (default
# 1,000,000) into deliveries by an expand-only worker (`run --roles expand --exit-when-drained`), on a
# throwaway PostgreSQL at PUSHIZO_BENCH_EXPANSION_PG_PORT (default 55438), PUSHIZO_BENCH_EXPANSION_ROUNDS times
# (default 1) on the same subscriptions, the queue emptied (TRUNCATE, VACUUM, CHECKPOINT) before each round.
# Per round: the wall time from the notification's created_at to its expanded_at (what scripts/bench.sh
# reports), the worker's CPU (user + sys, rusage of the exited child) and the database's CPU (user + sys of
# the backends that served the worker, from the postmaster's reaped-children times), each per delivery. CPU
# time is disturbed far less than wall time by other processes on a loaded machine; the load average is
# printed with each round. PUSHIZO_BENCH_EXPANSION_MIGRATIONS: the migrations directory (default migrations/),
# e.g. a copy without the latest ones for a before/after pair. Usage: scripts/bench/expansion.sh [BINDIR]
# (default: the release build).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bindir=${1:-$(swift build -c release --show-bin-path)}
n=${PUSHIZO_BENCH_EXPANSION:-1000000}
rounds=${PUSHIZO_BENCH_EXPANSION_ROUNDS:-1}
pg_port=${PUSHIZO_BENCH_EXPANSION_PG_PORT:-55438}
work=$root/var/bench-expansion-$pg_port
rm -rf "$work"; mkdir -p "$work"
trap 'scripts/pg-throwaway.sh stop "$work/pg" >/dev/null 2>&1 || true' EXIT
source scripts/bench/common.sh
bench_database "$pg_port" "${PUSHIZO_BENCH_EXPANSION_MIGRATIONS:-$root/migrations}"
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$n" <<'SQL'
INSERT INTO apps (id) VALUES ('00000000-0000-4000-8000-0000000e8a10');
INSERT INTO subscriptions (app_id, platform, token)
SELECT '00000000-0000-4000-8000-0000000e8a10', 'ios', 'a1' || md5(n::text) || substr(md5('e' || n), 1, 30)
FROM generate_series(1, :n) n;
VACUUM ANALYZE subscriptions;
SQL
postmaster=$(head -n 1 "$work/pg/data/postmaster.pid")
# User + system clock ticks of the postmaster's exited (reaped) children: the backends, once they are gone.
reaped_ticks() { awk '{ print $16 + $17 }' "/proc/$postmaster/stat"; }
tck=$(getconf CLK_TCK)
for round in $(seq 1 "$rounds"); do
    psql "$PUSHIZO_DATABASE_URL" -q -c "TRUNCATE deliveries" -c "DELETE FROM notifications" \
        -c "VACUUM ANALYZE deliveries" -c "VACUUM notifications" -c "CHECKPOINT"
    sleep 1
    before=$(reaped_ticks)
    psql "$PUSHIZO_DATABASE_URL" -qc "INSERT INTO notifications (app_id, message, target) VALUES ('00000000-0000-4000-8000-0000000e8a10', '{\"contents\": {\"en\": \"all\"}}', '{\"all\": true}')"
    # bash's `time` reports the rusage of the finished child (user, sys), as cpu-per-delivery.sh does.
    TIMEFORMAT='%U %S'
    { time "$bindir/pushizo-worker" run --roles expand --exit-when-drained --poll-interval 0.05 --log-level warning \
        2>"$work/expansion-$round.log" ; } 2>"$work/time-$round"
    sleep 1
    after=$(reaped_ticks)
    read -r user sys < "$work/time-$round"
    read -r seconds created < <(psql "$PUSHIZO_DATABASE_URL" -Atq -F ' ' -c "SELECT round(extract(epoch FROM expanded_at - created_at)::numeric, 2), targeted_count FROM notifications")
    awk -v s="$seconds" -v c="$created" -v wu="$user" -v ws="$sys" -v db="$(( after - before ))" -v tck="$tck" \
        -v load="$(cut -d' ' -f1-3 /proc/loadavg)" -v r="$round" 'BEGIN {
        printf "round %d: %d deliveries in %.2f s (%.2f us each); worker CPU %.2f s (%.2f us each), database CPU %.2f s (%.2f us each); load %s\n",
            r, c, s, s * 1e6 / c, wu + ws, (wu + ws) * 1e6 / c, db / tck, db / tck * 1e6 / c, load }'
done
