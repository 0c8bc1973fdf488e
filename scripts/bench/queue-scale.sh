#!/usr/bin/env bash
# How the drain rate scales with the queue's depth and with the number of workers on one database, against
# the APNs emulator (TLS) and a throwaway PostgreSQL:
#   workers: a queue of PUSHIZO_BENCH_QUEUE_SMALL deliveries (default 100,000: one notification to as many
#            devices) drained by 1, 2 and 4 `pushizo-worker run --exit-when-drained` side by side
#            (PUSHIZO_BENCH_WORKER_COUNTS), refilled before each count;
#   depth:   a queue of PUSHIZO_BENCH_QUEUE_LARGE deliveries (default 10,000,000: 100 notifications to the
#            same devices, generated with generate_series straight into deliveries) from which one worker
#            sends SMALL deliveries and is then stopped (SIGTERM: it finishes what it claimed), against the
#            1-worker drain of the small queue, measured before and again after the deep queue (minutes
#            apart on a shared machine: the two show how far the machine's load moved; the ratio uses their
#            mean). The claim/complete SQL alone (pgbench, scripts/bench/claim-complete.pgbench) drains SMALL
#            deliveries from each queue too, each freshly vacuumed, so a difference can be told apart as the
#            database's or the worker's.
# A rate is the sent events divided by the span between the first and the last one (process start-up and the
# drained check at the end are not counted; every run is measured the same way).
# Prints one line per measurement and a last line `queue_scale small=<per s> large=<per s> ...` that
# scripts/bench.sh reads. Usage: scripts/bench/queue-scale.sh [BINDIR] (default: the release build).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bindir=${1:-$(swift build -c release --show-bin-path)}
small=${PUSHIZO_BENCH_QUEUE_SMALL:-100000}
large=${PUSHIZO_BENCH_QUEUE_LARGE:-10000000}
worker_counts=${PUSHIZO_BENCH_WORKER_COUNTS:-1 2 4}
pg_port=${PUSHIZO_BENCH_QUEUE_PG_PORT:-55438}
pgbin=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
work=$root/var/bench-queue-$pg_port
rm -rf "$work"; mkdir -p "$work"
app=00000000-0000-4000-8000-0000000de9e0
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    scripts/pg-throwaway.sh stop "$work/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT

. scripts/bench/common.sh
bench_database "$pg_port"
bench_emulator emulator
pids+=("$emulator_pid")
bench_apns_app "$app" emulator
# PUSHIZO_BENCH_QUEUE_SLOW_MS: statements slower than this are logged with their duration in
# var/bench-queue-<port>/pg/postgres.log (log_min_duration_statement), to see what a deep queue slows down.
if [ -n "${PUSHIZO_BENCH_QUEUE_SLOW_MS:-}" ]; then
    psql "$PUSHIZO_DATABASE_URL" -q -c "ALTER SYSTEM SET log_min_duration_statement = ${PUSHIZO_BENCH_QUEUE_SLOW_MS}" -c "SELECT pg_reload_conf()" >/dev/null
fi
notifications=$(( (large + small - 1) / small ))
# Every notification carries the same message, so a delivery of any of them costs the worker the same.
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v app="$app" -v n="$small" -v notifications="$notifications" <<'SQL'
INSERT INTO subscriptions (app_id, platform, token, language)
SELECT :'app', 'ios', 'a5' || md5(n::text) || substr(md5('q' || n), 1, 30), 'en'
FROM generate_series(1, :n) n;
-- Already expanded: their deliveries are written below, as expansion would have written them.
INSERT INTO notifications (app_id, message, target, status, targeted_count, expanded_at)
SELECT :'app', '{"headings": {"en": "Bench"}, "contents": {"en": "A notification of ordinary size for a benchmark run"}, "data": {"k": "v"}}',
       '{"all": true}', 'expanded', :n, now()
FROM generate_series(1, :notifications);
VACUUM ANALYZE;
SQL

# Writes the deliveries of the notifications whose row number (by id) modulo $2 is $3 ($1 of them at most).
fill() {
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v app="$app" -v limit="$1" -v parts="$2" -v part="$3" <<'SQL'
INSERT INTO deliveries (notification_id, subscription_id, app_id)
SELECT n.id, s.id, n.app_id
FROM (SELECT id, app_id FROM (SELECT id, app_id, row_number() OVER (ORDER BY id) - 1 AS i FROM notifications WHERE app_id = :'app') o
      WHERE i < :limit AND i % :parts = :part) n
CROSS JOIN subscriptions s WHERE s.app_id = :'app';
SQL
}
sent() { psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM delivery_events WHERE event = 'sent'"; }
# Sent events per second between the first and the last; then forgets them for the next run.
rate() {
    psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT round(count(*) / greatest(extract(epoch FROM max(at) - min(at)), 0.001))
        FROM delivery_events WHERE event = 'sent'"
    psql "$PUSHIZO_DATABASE_URL" -qc "TRUNCATE delivery_events"
}
export PUSHIZO_CA_FILE=$work/tls/ca.pem PUSHIZO_POLL_INTERVAL=0.05 PUSHIZO_ALLOW_PRIVATE_NETWORKS=true
worker() { "$bindir/pushizo-worker" run "$@" 2>>"$work/worker.log" >/dev/null; }
# The claim/complete SQL alone, 4 clients, batches of 200, prepared as the worker's: $small deliveries' worth;
# prints deliveries/s.
claim_complete() {
    "$pgbin/pgbench" -n -M prepared -c 4 -j 2 -t $(( small / 800 )) -f scripts/bench/claim-complete.pgbench "$PUSHIZO_DATABASE_URL" 2>/dev/null \
        | awk '/^tps = / { printf "%.0f", $3 * 200 }'
    psql "$PUSHIZO_DATABASE_URL" -qc "TRUNCATE delivery_events"
}

workers_rows=()
small_rate=
for count in $worker_counts; do
    fill 1 1 0
    psql "$PUSHIZO_DATABASE_URL" -qc "VACUUM ANALYZE deliveries"
    running=()
    for _ in $(seq 1 "$count"); do worker --exit-when-drained & running+=($!); done
    for pid in "${running[@]}"; do wait "$pid"; done
    sent_now=$(sent)
    workers_rate=$(rate)
    [ "$count" = 1 ] && small_rate=$workers_rate
    echo "    $count worker(s), one database: $sent_now of $small sent at $workers_rate/s"
    workers_rows+=("$count=$workers_rate")
done
fill 1 1 0
psql "$PUSHIZO_DATABASE_URL" -qc "VACUUM ANALYZE deliveries"
pgbench_small=$(claim_complete)
echo "    claim/complete SQL alone (pgbench) on a $small-delivery queue: $pgbench_small/s"
if [ -z "$small_rate" ]; then
    # The worker counts did not include 1: the depth comparison needs the 1-worker drain of the small queue.
    worker --exit-when-drained
    small_rate=$(rate)
fi

# The deep queue. Inserting 10M rows into six indexes one row at a time takes minutes on this machine: the
# indexes and unique keys are dropped, the rows written by two sessions (foreign-key triggers off through
# session_replication_role; every row names an existing notification and subscription), then the same
# definitions rebuilt by sorting. Built that way they are denser than a queue grown by expansion would have.
psql "$PUSHIZO_DATABASE_URL" -qc "TRUNCATE deliveries"
generation_started=$(date +%s.%N)
psql "$PUSHIZO_DATABASE_URL" -Atq >"$work/rebuild.sql" <<'SQL'
SELECT 'ALTER TABLE deliveries ADD CONSTRAINT ' || quote_ident(conname) || ' ' || pg_get_constraintdef(oid) || ';'
FROM pg_constraint WHERE conrelid = 'deliveries'::regclass AND contype IN ('p', 'u')
UNION ALL
SELECT pg_get_indexdef(indexrelid) || ';' FROM pg_index i
WHERE indrelid = 'deliveries'::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid);
SQL
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 <<'SQL'
SELECT 'ALTER TABLE deliveries DROP CONSTRAINT ' || quote_ident(conname)
FROM pg_constraint WHERE conrelid = 'deliveries'::regclass AND contype IN ('p', 'u') \gexec
SELECT 'DROP INDEX ' || indexrelid::regclass FROM pg_index WHERE indrelid = 'deliveries'::regclass \gexec
SQL
PGOPTIONS="-c session_replication_role=replica" fill "$notifications" 2 0 &
part=$!
PGOPTIONS="-c session_replication_role=replica" fill "$notifications" 2 1
wait "$part"
PGOPTIONS="-c maintenance_work_mem=512MB" psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -f "$work/rebuild.sql"
psql "$PUSHIZO_DATABASE_URL" -qc "VACUUM ANALYZE deliveries"
# Generation and the VACUUM after it leave gigabytes of dirty pages; writing them out is not the drain's work
# (a queue that grew over hours has long been written out), so it happens here, before the deep drain.
psql "$PUSHIZO_DATABASE_URL" -qc "CHECKPOINT"
generation_seconds=$(awk -v a="$generation_started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
queued=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM deliveries")
echo "    $queued deliveries queued in $generation_seconds s ($(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT pg_size_pretty(pg_total_relation_size('deliveries'))") with indexes)"

# Started directly (not through the function), so that $! is the worker and the SIGTERM below reaches it.
"$bindir/pushizo-worker" run 2>>"$work/worker.log" >/dev/null &
deep_worker=$!
pids+=($deep_worker)
while kill -0 "$deep_worker" 2>/dev/null && [ "$(sent)" -lt "$small" ]; do sleep 0.5; done
kill -TERM "$deep_worker" 2>/dev/null || true
wait "$deep_worker" || true
sent_now=$(sent)
large_rate=$(rate)
echo "    1 worker, the first $sent_now deliveries of the $queued-delivery queue: $large_rate/s"
# The worker left its deliveries' dead index entries at the head of the claim order; the small queue's
# pgbench run started from a vacuumed table, and so does this one.
psql "$PUSHIZO_DATABASE_URL" -qc "VACUUM deliveries"
pgbench_large=$(claim_complete)
echo "    claim/complete SQL alone (pgbench) on the deep queue: $pgbench_large/s (a $small-delivery queue: $pgbench_small/s)"

psql "$PUSHIZO_DATABASE_URL" -qc "TRUNCATE deliveries"
fill 1 1 0
psql "$PUSHIZO_DATABASE_URL" -qc "VACUUM ANALYZE deliveries"
worker --exit-when-drained
small_after=$(rate)
small_mean=$(( (small_rate + small_after) / 2 ))
echo "    1 worker, a $small-delivery queue again: $small_after/s (before the deep queue: $small_rate/s; mean $small_mean/s)"
echo "queue_scale small=$small_mean large=$large_rate small_before=$small_rate small_after=$small_after queued_large=$queued pgbench_small=$pgbench_small pgbench_large=$pgbench_large generation_seconds=$generation_seconds workers ${workers_rows[*]}"
