#!/usr/bin/env bash
# The worker's CPU time (user + sys, from the kernel's rusage of the finished child, so other processes on a
# loaded machine disturb it far less than wall time) per sent delivery, on two workloads, each drained by one
# `pushizo-worker run --exit-when-drained` against the APNs emulator (TLS) and a throwaway PostgreSQL:
#   broadcast:  PUSHIZO_BENCH_CPU_BROADCAST deliveries (default 100,000), 1,000 subscriptions per notification,
#               three languages (en, tr, de), as section 2 of scripts/bench.sh;
#   one-device: PUSHIZO_BENCH_CPU_SINGLES one-device notifications (default 10,000), each to a different
#               subscription, as the transactional workload.
# Expansion, claims, rendering, TLS/HTTP/2 and completions are all counted: the worker's whole cost.
# Prints one line per workload and a last line `cpu_us_per_delivery broadcast=<µs> one_device=<µs>` that
# scripts/bench.sh reads. Usage: scripts/bench/cpu-per-delivery.sh [BINDIR] (default: the release build).
# PUSHIZO_BENCH_WRAPPER (e.g. "valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p") wraps the worker.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bindir=${1:-$(swift build -c release --show-bin-path)}
broadcast=${PUSHIZO_BENCH_CPU_BROADCAST:-100000}
singles=${PUSHIZO_BENCH_CPU_SINGLES:-10000}
pg_port=${PUSHIZO_BENCH_CPU_PG_PORT:-55437}
work=$root/var/bench-cpu-$pg_port
rm -rf "$work"; mkdir -p "$work"
pid_emulator=
cleanup() {
    [ -n "$pid_emulator" ] && { kill "$pid_emulator" 2>/dev/null || true; wait "$pid_emulator" 2>/dev/null || true; }
    scripts/pg-throwaway.sh stop "$work/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT

. scripts/bench/common.sh
bench_database "$pg_port"
bench_emulator emulator
pid_emulator=$emulator_pid
bench_apns_app 00000000-0000-4000-8000-0000000c0fe0 emulator
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$broadcast" -v singles="$singles" <<'SQL'
INSERT INTO subscriptions (id, app_id, platform, token, language)
SELECT md5('c' || n)::uuid, '00000000-0000-4000-8000-0000000c0fe0', 'ios',
       'a3' || md5(n::text) || substr(md5('d' || n), 1, 30), (ARRAY['en', 'tr', 'de'])[1 + n % 3]
FROM generate_series(1, greatest(:n, :singles)) n;
VACUUM ANALYZE;
SQL

# Runs the worker until the queue is drained; prints "<sent> <cpu seconds>".
drain() {
    local cpu
    TIMEFORMAT='%3U %3S'
    cpu=$( { time PUSHIZO_CA_FILE=$work/tls/ca.pem PUSHIZO_POLL_INTERVAL=0.05 PUSHIZO_ALLOW_PRIVATE_NETWORKS=true \
        ${PUSHIZO_BENCH_WRAPPER:-} "$bindir/pushizo-worker" run --exit-when-drained 2>>"$work/worker.log" ; } 2>&1 )
    local sent
    sent=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM delivery_events WHERE event = 'sent'")
    echo "$sent $(awk -v u="${cpu% *}" -v s="${cpu#* }" 'BEGIN { printf "%.3f", u + s }')"
}
per_delivery() { awk -v s="$1" -v c="$2" 'BEGIN { if (s > 0) printf "%.1f", c * 1e6 / s; else print "null" }'; }

psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$broadcast" <<'SQL'
INSERT INTO notifications (app_id, message, target)
SELECT '00000000-0000-4000-8000-0000000c0fe0',
       '{"headings": {"en": "Bench", "tr": "Ölçüm"}, "contents": {"en": "A notification of ordinary size for a benchmark run", "tr": "Sıradan boyutta bir bildirim"}, "data": {"k": "v"}}',
       jsonb_build_object('include_subscription_ids', jsonb_agg(id))
FROM (SELECT id, (row_number() OVER (ORDER BY id) - 1) / 1000 AS chunk FROM subscriptions ORDER BY id LIMIT :n) s GROUP BY chunk;
SQL
read -r broadcast_sent broadcast_cpu <<<"$(drain)"
broadcast_us=$(per_delivery "$broadcast_sent" "$broadcast_cpu")
echo "    broadcast: $broadcast_sent sent, worker CPU ${broadcast_cpu} s (user+sys): $broadcast_us µs per sent delivery"

psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$singles" <<'SQL'
TRUNCATE delivery_events;
INSERT INTO notifications (app_id, campaign_id, message, target)
SELECT '00000000-0000-4000-8000-0000000c0fe0', 'single', '{"headings": {"en": "Order update"}, "contents": {"en": "Your order shipped"}}',
       jsonb_build_object('include_subscription_ids', jsonb_build_array(md5('c' || i)::uuid))
FROM generate_series(1, :n) i;
VACUUM ANALYZE notifications;
SQL
read -r singles_sent singles_cpu <<<"$(drain)"
singles_us=$(per_delivery "$singles_sent" "$singles_cpu")
echo "    one-device: $singles_sent sent, worker CPU ${singles_cpu} s (user+sys): $singles_us µs per sent delivery"
echo "cpu_us_per_delivery broadcast=$broadcast_us one_device=$singles_us broadcast_sent=$broadcast_sent one_device_sent=$singles_sent"
