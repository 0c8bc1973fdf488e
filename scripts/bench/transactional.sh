#!/usr/bin/env bash
# The transactional workload of scripts/bench.sh (section 4) alone, with where the latency goes: one-device
# notifications inserted by pgbench at steady rates against one `pushizo-worker run` with its defaults and the
# APNs emulator (TLS), each step reported as sustained or not; at the first step, insert -> provider receipt
# p50/p99 split into insert -> expansion (notifications.expanded_at, the expanding transaction's start) and
# expansion -> receipt (the emulator's receipt time, ms resolution), and receipt -> the `sent` event's
# transaction. Prints one `transactional ...` line last.
# Usage: scripts/bench/transactional.sh [BINDIR] (default: the release build). Knobs: PUSHIZO_BENCH_STEADY_RATES
# (default "1000 2000 5000 6000 7000 8000"), PUSHIZO_BENCH_STEADY_SECONDS (15), PUSHIZO_BENCH_STEADY_GRACE (3),
# PUSHIZO_BENCH_STEADY_DEVICES (20000), PUSHIZO_BENCH_TX_SETUP_SQL (below), PUSHIZO_BENCH_TX_HISTORY (20000 expanded notifications before the steps), PUSHIZO_BENCH_TX_PG_PORT (55438), PUSHIZO_BENCH_WRAPPER (wraps the
# worker, e.g. "perf record -g -o /tmp/perf.data").
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bindir=${1:-$(swift build -c release --show-bin-path)}
steady_rates=${PUSHIZO_BENCH_STEADY_RATES:-1000 2000 5000 6000 7000 8000}
steady_seconds=${PUSHIZO_BENCH_STEADY_SECONDS:-15}
steady_grace=${PUSHIZO_BENCH_STEADY_GRACE:-3}
steady_devices=${PUSHIZO_BENCH_STEADY_DEVICES:-20000}
pg_port=${PUSHIZO_BENCH_TX_PG_PORT:-55438}
work=$root/var/bench-tx-$pg_port
rm -rf "$work"; mkdir -p "$work"
pgbin=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    scripts/pg-throwaway.sh stop "$work/pg" >/dev/null 2>&1 || true
    cp "$work/pg/postgres.log" "$work/postgres.log" 2>/dev/null || true
}
trap cleanup EXIT

export PUSHIZO_DATABASE_URL=$(scripts/pg-throwaway.sh start "$work/pg" "$pg_port")
"$bindir/pushizo-worker" migrate --migrations-dir "$root/migrations" 2>/dev/null
# PUSHIZO_BENCH_TX_SETUP_SQL: SQL run once after the migrations, before the worker connects (to try a setting,
# e.g. "ALTER DATABASE pushizo SET plan_cache_mode = force_custom_plan").
if [ -n "${PUSHIZO_BENCH_TX_SETUP_SQL:-}" ]; then
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -c "$PUSHIZO_BENCH_TX_SETUP_SQL" >/dev/null
fi
# PUSHIZO_BENCH_TX_PG_LOG_MS: PostgreSQL logs statements slower than this, and lock waits longer than 20 ms
# (in $work/postgres.log).
if [ -n "${PUSHIZO_BENCH_TX_PG_LOG_MS:-}" ]; then
    psql "$PUSHIZO_DATABASE_URL" -q -c "ALTER SYSTEM SET log_min_duration_statement = ${PUSHIZO_BENCH_TX_PG_LOG_MS}" \
        -c "ALTER SYSTEM SET log_lock_waits = on" -c "ALTER SYSTEM SET deadlock_timeout = '20ms'" -c "SELECT pg_reload_conf()" >/dev/null
fi
# PUSHIZO_BENCH_TX_PG_STATS=1: the server's statements by total execution time at the end (pg_stat_statements,
# which needs a restart to load).
if [ -n "${PUSHIZO_BENCH_TX_PG_STATS:-}" ]; then
    psql "$PUSHIZO_DATABASE_URL" -q -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
    scripts/pg-throwaway.sh stop "$work/pg" >/dev/null
    scripts/pg-throwaway.sh start "$work/pg" "$pg_port" >/dev/null
    psql "$PUSHIZO_DATABASE_URL" -q -c "CREATE EXTENSION pg_stat_statements" -c "ALTER SYSTEM SET pg_stat_statements.track = 'all'" -c "ALTER SYSTEM SET pg_stat_statements.track_planning = on" -c "SELECT pg_reload_conf()" >/dev/null
fi
# PUSHIZO_BENCH_TX_EXPLAIN_MS: the plans (with timings, triggers included) of statements slower than this (auto_explain).
if [ -n "${PUSHIZO_BENCH_TX_EXPLAIN_MS:-}" ]; then
    psql "$PUSHIZO_DATABASE_URL" -q -c "LOAD 'auto_explain'" -c "ALTER SYSTEM SET session_preload_libraries = 'auto_explain'" \
        -c "ALTER SYSTEM SET auto_explain.log_min_duration = ${PUSHIZO_BENCH_TX_EXPLAIN_MS}" \
        -c "ALTER SYSTEM SET auto_explain.log_analyze = on" -c "ALTER SYSTEM SET auto_explain.log_buffers = on" -c "ALTER SYSTEM SET auto_explain.log_triggers = on" -c "ALTER SYSTEM SET auto_explain.log_nested_statements = on" \
        -c "SELECT pg_reload_conf()" >/dev/null
fi
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.p8" 2>/dev/null
"$bindir/pushizo-worker" emulator --emulator-listen 127.0.0.1:0 --emulator-tls-dir "$work/tls" \
    --emulator-apns-keys "BENCHTEAM1:BENCHKEY01:$work/key.p8" --emulator-ready-file "$work/emulator.port" \
    --emulator-request-log "$work/requests.jsonl" --log-level warning 2>"$work/emulator.log" &
emulator=$!
pids+=($emulator)
for _ in $(seq 1 100); do [ -s "$work/emulator.port" ] && break; sleep 0.1; done
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v key="$(cat "$work/key.p8")" \
    -v endpoint="https://localhost:$(cat "$work/emulator.port")" -v n="$steady_devices" -v history="${PUSHIZO_BENCH_TX_HISTORY:-20000}" <<'SQL'
INSERT INTO apps (id, default_language) VALUES ('00000000-0000-4000-8000-00000000057d', 'en');
INSERT INTO app_channels (app_id, provider, settings, endpoint)
VALUES ('00000000-0000-4000-8000-00000000057d', 'apns',
        jsonb_build_object('team_id', 'BENCHTEAM1', 'key_id', 'BENCHKEY01', 'private_key', :'key', 'topic', 'dev.pushizo.bench'),
        :'endpoint');
INSERT INTO subscriptions (id, app_id, platform, token, language)
SELECT md5('t' || n)::uuid, '00000000-0000-4000-8000-00000000057d', 'ios', 'a2' || md5(n::text) || substr(md5('s' || n), 1, 30), 'en'
FROM generate_series(1, :n) n;
-- A history of notifications already expanded (a running system has one; PUSHIZO_BENCH_TX_HISTORY, default
-- 20,000): plans PostgreSQL caches per connection (the foreign-key check of a delivery's notification_id)
-- are then made for a table of that size, not for an empty one whose sequential scan grows with every step.
INSERT INTO notifications (app_id, campaign_id, message, target, status, expanded_at)
SELECT '00000000-0000-4000-8000-00000000057d', 'history', '{"contents": {"en": "old"}}',
       jsonb_build_object('include_subscription_ids', jsonb_build_array(md5('t' || n)::uuid)), 'expanded', now()
FROM generate_series(1, :history) n;
VACUUM ANALYZE;
SQL
PUSHIZO_CA_FILE=$work/tls/ca.pem PUSHIZO_ALLOW_PRIVATE_NETWORKS=true ${PUSHIZO_BENCH_WRAPPER:-} "$bindir/pushizo-worker" run \
    2>"$work/worker.log" &
worker=$!
pids+=($worker)
sleep 1
worker_pid=$(pgrep -n -f "^$bindir/pushizo-worker run" || echo "$worker")
# process_ticks and pg_ticks: CPU ticks of a process, of the whole PostgreSQL server.
. scripts/bench/common.sh
sustained=0
for rate in $steady_rates; do
    cpu_before=$(process_ticks "$worker_pid"); pg_before=$(pg_ticks); emulator_before=$(process_ticks "$emulator")
    "$pgbin/pgbench" -n -M prepared -c 4 -j 2 -R "$rate" -T "$steady_seconds" -D step="$rate" -D subscriptions="$steady_devices" \
        -f scripts/bench/steady-insert.pgbench "$PUSHIZO_DATABASE_URL" >"$work/pgbench-$rate.log" 2>&1 || true
    sleep "$steady_grace"
    read -r inserted delivered achieved <<<"$(psql "$PUSHIZO_DATABASE_URL" -AtF' ' -c "
        SELECT count(*), (SELECT count(*) FROM delivery_events e JOIN notifications m ON m.id = e.notification_id
                          WHERE m.campaign_id = 'step-$rate' AND e.event = 'sent'),
               round(count(*) / greatest(extract(epoch FROM max(created_at) - min(created_at)), 0.001))
        FROM notifications WHERE campaign_id = 'step-$rate'")"
    cpu=$(( $(process_ticks "$worker_pid") - cpu_before )); pg_cpu=$(( $(pg_ticks) - pg_before )); emulator_cpu=$(( $(process_ticks "$emulator") - emulator_before ))
    verdict=no
    if [ "$inserted" -gt 0 ] && [ "$delivered" = "$inserted" ]; then verdict=yes; if [ "$achieved" -gt "$sustained" ]; then sustained=$achieved; fi; fi
    echo "    $rate/s asked, $achieved/s inserted: $delivered of $inserted delivered ${steady_grace} s after the last insert (sustained: $verdict; CPU ticks: worker $cpu, PostgreSQL $pg_cpu, emulator $emulator_cpu; load $(cut -d' ' -f1-3 /proc/loadavg))"
    for _ in $(seq 1 120); do
        [ "$(psql "$PUSHIZO_DATABASE_URL" -Atc "SELECT (SELECT count(*) FROM notifications WHERE status IN ('pending', 'expanding')) + (SELECT count(*) FROM deliveries)")" = 0 ] && break
        sleep 0.5
    done
done
kill "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true
kill "$emulator" 2>/dev/null || true; wait "$emulator" 2>/dev/null || true
latency_rate=${steady_rates%% *}
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -c "CREATE TABLE bench_received (line jsonb)" \
    -c "\\copy bench_received (line) FROM '$work/requests.jsonl' WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')"
psql "$PUSHIZO_DATABASE_URL" -At -F' ' -c "
    WITH l AS (
        SELECT extract(epoch FROM (r.line->>'at')::timestamptz - n.created_at) * 1000 AS total,
               extract(epoch FROM n.expanded_at - n.created_at) * 1000 AS expand,
               extract(epoch FROM (r.line->>'at')::timestamptz - n.expanded_at) * 1000 AS send,
               extract(epoch FROM e.at - (r.line->>'at')::timestamptz) * 1000 AS complete
        FROM bench_received r
        JOIN delivery_events e ON e.event = 'sent' AND e.detail->>'apns_id' = r.line->>'apns_id'
        JOIN notifications n ON n.id = e.notification_id AND n.campaign_id = 'step-$latency_rate')
    SELECT 'transactional sustained=$sustained rate=$latency_rate n=' || count(*)
        || ' p50=' || round((percentile_cont(0.5) WITHIN GROUP (ORDER BY total))::numeric, 1)
        || ' p99=' || round((percentile_cont(0.99) WITHIN GROUP (ORDER BY total))::numeric, 1)
        || ' expand_p50=' || round((percentile_cont(0.5) WITHIN GROUP (ORDER BY expand))::numeric, 1)
        || ' expand_p99=' || round((percentile_cont(0.99) WITHIN GROUP (ORDER BY expand))::numeric, 1)
        || ' send_p50=' || round((percentile_cont(0.5) WITHIN GROUP (ORDER BY send))::numeric, 1)
        || ' send_p99=' || round((percentile_cont(0.99) WITHIN GROUP (ORDER BY send))::numeric, 1)
        || ' complete_p50=' || round((percentile_cont(0.5) WITHIN GROUP (ORDER BY complete))::numeric, 1)
        || ' load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' /)'
    FROM l"
if [ -n "${PUSHIZO_BENCH_TX_PG_STATS:-}" ]; then
    psql "$PUSHIZO_DATABASE_URL" -c "
        SELECT calls, round(total_exec_time) AS total_ms, round((total_exec_time / nullif(calls, 0))::numeric, 2) AS ms_per_call,
               plans, round((total_plan_time / nullif(calls, 0))::numeric, 2) AS plan_ms_per_call,
               rows, round(shared_blks_hit::numeric / nullif(calls, 0)) AS blocks_per_call, left(regexp_replace(query, '\s+', ' ', 'g'), 60) AS query
        FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15" \
        -c "SELECT relname, seq_scan, seq_tup_read, idx_scan, n_tup_ins, n_tup_del, n_dead_tup, autovacuum_count, autoanalyze_count
            FROM pg_stat_user_tables WHERE relname IN ('notifications', 'deliveries', 'subscriptions', 'delivery_events_default', 'apps', 'app_channels')"
fi
# With PUSHIZO_BENCH_TX_TIMELINE=1: the first step second by second (inserted, expanded, received by the
# emulator, events written), to see which stage falls behind.
if [ -n "${PUSHIZO_BENCH_TX_TIMELINE:-}" ]; then
    psql "$PUSHIZO_DATABASE_URL" -q -c "
        WITH t0 AS (SELECT min(created_at) AS t FROM notifications WHERE campaign_id = 'step-$latency_rate'),
        sec AS (SELECT s, t0.t + s * interval '1 s' AS a, t0.t + (s + 1) * interval '1 s' AS b
                FROM t0, generate_series(0, $steady_seconds + $steady_grace + 5) s)
        SELECT s,
               (SELECT count(*) FROM notifications WHERE campaign_id = 'step-$latency_rate' AND created_at >= a AND created_at < b) AS inserted,
               (SELECT count(*) FROM notifications WHERE campaign_id = 'step-$latency_rate' AND expanded_at >= a AND expanded_at < b) AS expanded,
               (SELECT count(*) FROM bench_received WHERE (line->>'at')::timestamptz >= a AND (line->>'at')::timestamptz < b) AS received,
               (SELECT count(*) FROM delivery_events WHERE at >= a AND at < b) AS events
        FROM sec ORDER BY s"
fi
