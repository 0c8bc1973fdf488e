#!/usr/bin/env bash
# The fairness workload of scripts/bench.sh (section 8) alone: one app's broadcast to PUSHIZO_BENCH_FAIR_SIZE
# devices (default 1,000,000) drained by one `pushizo-worker run` with its defaults against the APNs emulator
# (TLS), first alone, then with another app's one-device notifications inserted by pgbench at
# PUSHIZO_BENCH_FAIR_RATE per second (default 50) for as long as it drains. Prints the other app's insert ->
# emulator receipt p50/p99 (target p99 < 100 ms) and the broadcast's rate beside them against its rate alone
# (target >= 0.9x, a drop of 10 % at most), then one `fairness ...` line last.
# Usage: scripts/bench/fairness.sh [BINDIR] (default: the release build). Knobs: PUSHIZO_BENCH_FAIR_SIZE,
# PUSHIZO_BENCH_FAIR_RATE, PUSHIZO_BENCH_FAIR_PG_PORT (55439).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bindir=${1:-$(swift build -c release --show-bin-path)}
size=${PUSHIZO_BENCH_FAIR_SIZE:-1000000}
rate=${PUSHIZO_BENCH_FAIR_RATE:-50}
pg_port=${PUSHIZO_BENCH_FAIR_PG_PORT:-55439}
work=$root/var/bench-fair-$pg_port
rm -rf "$work"; mkdir -p "$work"
pgbin=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
broadcast_app=00000000-0000-4000-8000-0000000fa1a0
other_app=00000000-0000-4000-8000-0000000fa1b0
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    scripts/pg-throwaway.sh stop "$work/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT
. scripts/bench/common.sh
bench_database "$pg_port"
bench_emulator emulator --emulator-request-log "$work/requests.jsonl"
pids+=("$emulator_pid")
bench_apns_app "$broadcast_app" emulator
bench_apns_app "$other_app" emulator
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$size" -v a="$broadcast_app" -v b="$other_app" <<'SQL'
INSERT INTO subscriptions (app_id, platform, token, language)
SELECT :'a', 'ios', 'a0' || md5(n::text) || substr(md5('b' || n), 1, 30), 'en' FROM generate_series(1, :n) n;
-- The other app's devices: tokens starting b0b0, so their receipts are found in the emulator's log by prefix.
INSERT INTO subscriptions (id, app_id, platform, token, language)
SELECT md5('f' || n)::uuid, :'b', 'ios', 'b0b0' || md5(n::text) || substr(md5('c' || n), 1, 28), 'en'
FROM generate_series(1, 1000) n;
VACUUM ANALYZE;
SQL

# Runs one phase: a broadcast (campaign $1), with the other app's stream when $2 is a number of seconds.
# Prints the broadcast's receipts a second ("rate") from its `sent` events (first to last).
phase() {
    local campaign=$1 stream=${2:-}
    # The emulator appends to its log: this phase's lines are those after the current end (the phase runs in a
    # subshell, so the offset is kept in a file).
    echo $(( $(stat -c %s "$work/requests.jsonl" 2>/dev/null || echo 0) + 1 )) >"$work/log-offset-$campaign"
    psql "$PUSHIZO_DATABASE_URL" -q -c "DELETE FROM delivery_events" -c "
        INSERT INTO notifications (app_id, campaign_id, message, target)
        VALUES ('$broadcast_app', '$campaign', '{\"contents\": {\"en\": \"Big news\"}}', '{\"all\": true}')"
    # PUSHIZO_BENCH_FAIR_WORKER_ENV: more of the worker's settings, NAME=value words (say, a metrics listener).
    env PUSHIZO_CA_FILE="$work/tls/ca.pem" PUSHIZO_ALLOW_PRIVATE_NETWORKS=true ${PUSHIZO_BENCH_FAIR_WORKER_ENV:-} \
        "$bindir/pushizo-worker" run 2>"$work/worker-$campaign.log" &
    local worker=$!
    pids+=("$worker")
    if [ -n "$stream" ]; then
        "$pgbin/pgbench" -n -M prepared -c 2 -j 1 -R "$rate" -T "$stream" -D app="$other_app" \
            -f scripts/bench/fairness-insert.pgbench "$PUSHIZO_DATABASE_URL" >"$work/pgbench.log" 2>&1 || true
    fi
    # Drained: nothing left to expand or send (the stream's last notifications included).
    until [ "$(psql "$PUSHIZO_DATABASE_URL" -Atc "SELECT (SELECT count(*) FROM deliveries)
              + (SELECT count(*) FROM notifications WHERE status IN ('pending', 'expanding'))")" = 0 ]; do sleep 0.5; done
    kill "$worker"; wait "$worker" || true
    psql "$PUSHIZO_DATABASE_URL" -At -c "
        SELECT round(count(*) / greatest(extract(epoch FROM max(at) - min(at)), 0.001))
        FROM delivery_events WHERE app_id = '$broadcast_app' AND event = 'sent'"
}

echo "    the broadcast alone ($size devices)"
alone=$(phase alone)
drain=$(awk -v n="$size" -v r="$alone" 'BEGIN { printf "%d", n / (r > 0 ? r : 1) }')
echo "    the broadcast beside $rate one-device notifications a second of another app for ${drain} s"
beside=$(phase beside "$drain")
tail -c +"$(cat "$work/log-offset-beside")" "$work/requests.jsonl" | grep '"token":"b0b0' >"$work/other.jsonl" || true
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -c "CREATE TABLE bench_received (line jsonb)" \
    -c "\\copy bench_received (line) FROM '$work/other.jsonl' WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')"
# Insert -> receipt, and its two parts: insert -> expansion (the expanding transaction's start) -> receipt.
read -r count p50 p99 worst expand_p99 send_p99 <<<"$(psql "$PUSHIZO_DATABASE_URL" -At -F' ' -c "
    WITH l AS (
        SELECT extract(epoch FROM (r.line->>'at')::timestamptz - n.created_at) * 1000 AS ms,
               extract(epoch FROM n.expanded_at - n.created_at) * 1000 AS expand,
               extract(epoch FROM (r.line->>'at')::timestamptz - n.expanded_at) * 1000 AS send
        FROM bench_received r
        JOIN delivery_events e ON e.event = 'sent' AND e.detail->>'apns_id' = r.line->>'apns_id'
        JOIN notifications n ON n.id = e.notification_id AND n.campaign_id = 'fair')
    SELECT count(*), round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ms))::numeric, 1),
           round((percentile_cont(0.99) WITHIN GROUP (ORDER BY ms))::numeric, 1), round(max(ms)::numeric, 1),
           round((percentile_cont(0.99) WITHIN GROUP (ORDER BY expand))::numeric, 1),
           round((percentile_cont(0.99) WITHIN GROUP (ORDER BY send))::numeric, 1)
    FROM l")"
# The same p99 while the broadcast was being expanded (until its expanded_at) and after.
read -r during_p99 after_p99 <<<"$(psql "$PUSHIZO_DATABASE_URL" -At -F' ' -c "
    WITH b AS (SELECT expanded_at FROM notifications WHERE campaign_id = 'beside'),
    l AS (
        SELECT extract(epoch FROM (r.line->>'at')::timestamptz - n.created_at) * 1000 AS ms, n.created_at < b.expanded_at AS during
        FROM bench_received r
        JOIN delivery_events e ON e.event = 'sent' AND e.detail->>'apns_id' = r.line->>'apns_id'
        JOIN notifications n ON n.id = e.notification_id AND n.campaign_id = 'fair' CROSS JOIN b)
    SELECT round((percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) FILTER (WHERE during))::numeric, 1),
           round((percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) FILTER (WHERE NOT during))::numeric, 1)
    FROM l")"
inserted=$(psql "$PUSHIZO_DATABASE_URL" -At -c "SELECT count(*) FROM notifications WHERE campaign_id = 'fair'")
ratio=$(awk -v a="$alone" -v b="$beside" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }')
echo "    the other app: $count of $inserted one-device notifications received, insert -> receipt p50 ${p50} ms, p99 ${p99} ms, max ${worst} ms   target p99 < 100 ms"
echo "      (p99 insert -> expansion ${expand_p99} ms, expansion -> receipt ${send_p99} ms; p99 while the broadcast expands ${during_p99} ms, after ${after_p99} ms)"
echo "    the broadcast: $alone/s alone, $beside/s beside them (${ratio}x)   target >= 0.9x"
echo "fairness size=$size rate=$rate received=$count inserted=$inserted p50=$p50 p99=$p99 max=$worst alone=$alone beside=$beside ratio=$ratio load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' /)"
