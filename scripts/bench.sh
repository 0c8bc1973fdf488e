#!/usr/bin/env bash
# `make bench`: the performance targets as ratios measured in one run, on this machine, against baselines
# run on the same server in the same run. Prints ratios, never pass/fail timings.
#   1. transport: APNs-sized POSTs (3.9 KB) over 1 connection x 100 streams to nghttpd (h2c):
#      pushizo-bench (the worker's HTTP/2 client) vs h2load.                      target >= 0.8x
#   2. end to end: notifications rows -> worker -> APNs emulator (TLS) -> events, vs pgbench running the
#      worker's claim/complete SQL alone on the same PostgreSQL.                  target >= 0.5x
#   3. the worker's peak RSS during (2).                                          target < 150 MB
#   4. expansion of 1,000,000 subscriptions into deliveries ({"all": true}).     target < 10 s
# Targets not measured here: p99 send latency < 50 ms at 1,000 deliveries/s; the claim rate on a 10M-row
# queue within 20% of its rate on a 100k-row queue; CPU <= 20 µs per delivery.
# Its knobs are PUSHIZO_BENCH_* variables, a prefix the worker reserves and ignores (README, Configuration).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/var/bench
deliveries=${PUSHIZO_BENCH_DELIVERIES:-20000}
expansion_size=${PUSHIZO_BENCH_EXPANSION:-1000000}
pg_port=${PUSHIZO_BENCH_PG_PORT:-55435}
h2_port=${PUSHIZO_BENCH_H2_PORT:-55436}
rm -rf "$work"; mkdir -p "$work"

echo "==> building (release)"
swift build -c release 2>&1 | grep -E "error|Build complete" || true
bindir=$(swift build -c release --show-bin-path)
pgbin=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)

calc() { awk "BEGIN { printf \"%.4f\", $1 }"; }  # awk is in every Debian; bc is not
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    scripts/pg-throwaway.sh stop "$work/pg" || true
}
trap cleanup EXIT

echo "==> 1. transport: h2load vs pushizo-bench, 1 connection x 100 streams, 3.9 KB POSTs to nghttpd"
head -c 2900 /dev/urandom | base64 -w0 | head -c 3900 > "$work/body.bin"
nghttpd --no-tls -m 100 "$h2_port" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/$h2_port) 2>/dev/null && break; sleep 0.1; done
url=http://127.0.0.1:$h2_port/3/device/bench
h2load -n 5000 -c 1 -m 100 -d "$work/body.bin" "$url" >/dev/null 2>&1  # warm-up
h2load_rps=$(h2load -n 50000 -c 1 -m 100 -d "$work/body.bin" "$url" 2>&1 | sed -n 's/.*finished in .*, \([0-9.]*\) req\/s.*/\1/p')
ours_rps=$("$bindir/pushizo-bench" transport "$url" --requests 50000 --streams 100 --body "$work/body.bin" | sed -n 's/requests_per_second=\([0-9]*\).*/\1/p')
echo "    h2load: $h2load_rps req/s   pushizo-bench: $ours_rps req/s"

echo "==> 2. end to end: $deliveries deliveries"
export PUSHIZO_DATABASE_URL=$(scripts/pg-throwaway.sh start "$work/pg" "$pg_port")
"$bindir/pushizo-worker" migrate --migrations-dir "$root/migrations" 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.p8" 2>/dev/null
"$bindir/pushizo-worker" emulator --emulator-listen 127.0.0.1:0 --emulator-tls-dir "$work/tls" \
    --emulator-apns-keys "BENCHTEAM1:BENCHKEY01:$work/key.p8" --emulator-ready-file "$work/emulator.port" \
    --log-level warning 2>"$work/emulator.log" &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/emulator.port" ] && break; sleep 0.1; done
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v key="$(cat "$work/key.p8")" \
    -v endpoint="https://localhost:$(cat "$work/emulator.port")" -v n="$deliveries" <<'SQL'
INSERT INTO apps (id, default_language) VALUES ('00000000-0000-4000-8000-0000000be4c0', 'en');
INSERT INTO app_channels (app_id, provider, settings, endpoint)
VALUES ('00000000-0000-4000-8000-0000000be4c0', 'apns',
        jsonb_build_object('team_id', 'BENCHTEAM1', 'key_id', 'BENCHKEY01', 'private_key', :'key', 'topic', 'dev.pushizo.bench'),
        :'endpoint');
INSERT INTO subscriptions (app_id, platform, token, language)
SELECT '00000000-0000-4000-8000-0000000be4c0', 'ios', 'a0' || md5(n::text) || substr(md5('b' || n), 1, 30),
       (ARRAY['en', 'tr', 'de'])[1 + n % 3]
FROM generate_series(1, :n) n;
-- 1,000 subscriptions per notification.
INSERT INTO notifications (app_id, message, target)
SELECT '00000000-0000-4000-8000-0000000be4c0',
       '{"headings": {"en": "Bench", "tr": "Ölçüm"}, "contents": {"en": "A notification of ordinary size for a benchmark run", "tr": "Sıradan boyutta bir bildirim"}, "data": {"k": "v"}}',
       jsonb_build_object('include_subscription_ids', jsonb_agg(id))
FROM (SELECT id, (row_number() OVER (ORDER BY id) - 1) / 1000 AS chunk FROM subscriptions) s GROUP BY chunk;
SQL
started=$(date +%s.%N)
# PUSHIZO_BENCH_WRAPPER profiles the worker, e.g. "perf record -g -o /tmp/perf.data".
# The emulator is on 127.0.0.1: the operator switch lets the worker connect there (never in production).
PUSHIZO_CA_FILE=$work/tls/ca.pem PUSHIZO_POLL_INTERVAL=0.05 PUSHIZO_ALLOW_PRIVATE_NETWORKS=true ${PUSHIZO_BENCH_WRAPPER:-} "$bindir/pushizo-worker" run --exit-when-drained \
    2>"$work/worker.log"
finished=$(date +%s.%N)
sent=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM delivery_events WHERE event = 'sent'")
worker_jps=$(calc "$sent / ($finished - $started)")
peak_rss=$(sed -n 's/.*peak_rss_mb=\([0-9]*\).*/\1/p' "$work/worker.log" | tail -n 1)
steady_jps=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT round(count(*) / greatest(extract(epoch FROM max(at) - min(at)), 0.001)) FROM delivery_events WHERE event = 'sent'")
echo "    worker: $sent sent in $(calc "$finished - $started") s, start-up and expansion included ($steady_jps/s between the first and last event)"

# The same claim/complete SQL alone: refill the queue with the same deliveries and let pgbench drain it.
psql "$PUSHIZO_DATABASE_URL" -qc "TRUNCATE delivery_events; INSERT INTO deliveries (notification_id, subscription_id, app_id)
    SELECT n.id, s.id, n.app_id FROM notifications n CROSS JOIN LATERAL jsonb_array_elements_text(n.target->'include_subscription_ids') t(sid)
    JOIN subscriptions s ON s.id = t.sid::uuid" -c "VACUUM ANALYZE deliveries"
clients=4
transactions=$(( deliveries / (200 * clients) ))
pgbench_tps=$("$pgbin/pgbench" -n -c "$clients" -j 2 -t "$transactions" -f scripts/bench/claim-complete.pgbench \
    "$PUSHIZO_DATABASE_URL" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
pgbench_jps=$(calc "$pgbench_tps * 200")
echo "    pgbench (claim/complete SQL alone, $clients clients, batches of 200): $(printf %.0f "$pgbench_jps") jobs/s"

echo "==> 3. expansion of $expansion_size subscriptions ({\"all\": true}) by an expand-only worker"
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$expansion_size" <<'SQL'
INSERT INTO apps (id) VALUES ('00000000-0000-4000-8000-0000000e8a10');
INSERT INTO subscriptions (app_id, platform, token)
SELECT '00000000-0000-4000-8000-0000000e8a10', 'ios', 'a1' || md5(n::text) || substr(md5('e' || n), 1, 30)
FROM generate_series(1, :n) n;
VACUUM ANALYZE subscriptions;
SQL
psql "$PUSHIZO_DATABASE_URL" -qc "INSERT INTO notifications (app_id, message, target) VALUES ('00000000-0000-4000-8000-0000000e8a10', '{\"contents\": {\"en\": \"all\"}}', '{\"all\": true}')"
# An expand-only worker (PUSHIZO_ROLES=expand): expansion alone, as a fleet with dedicated expanders runs it.
"$bindir/pushizo-worker" run --roles expand --exit-when-drained --poll-interval 0.05 --log-level warning \
    2>"$work/expansion.log"
expansion_seconds=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT round(extract(epoch FROM expanded_at - created_at)::numeric, 1) FROM notifications WHERE app_id = '00000000-0000-4000-8000-0000000e8a10'")
echo "    $(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM deliveries WHERE app_id = '00000000-0000-4000-8000-0000000e8a10'") deliveries in ${expansion_seconds:-?} s"

echo
echo "==> ratios against the targets"
printf "  %-55s %6.2fx   (target >= 0.80)\n" "HTTP/2 transport vs h2load" "$(calc "$ours_rps / $h2load_rps")"
printf "  %-55s %6.2fx   (target >= 0.50)\n" "end to end (worker jobs/s vs pgbench claim/complete)" "$(calc "$worker_jps / $pgbench_jps")"
printf "  %-55s %6s MB   (target < 150)\n" "worker peak RSS" "${peak_rss:-?}"
printf "  %-55s %6s s    (target < 10)\n" "expansion of $expansion_size subscriptions" "${expansion_seconds:-?}"
