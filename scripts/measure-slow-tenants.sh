#!/usr/bin/env bash
# Measures what docs/security.md ("What is left") and docs/fairness.md report about one tenant whose Web Push
# subscribers' push services answer slowly: ORIGINS push services (emulators, each its own origin) holding every
# answer LATENCY seconds, SUBSCRIBERS web subscriptions at each, one broadcast to all of them; then another app's
# PROBES one-device APNs pushes, one every GAP seconds, to an emulator that answers at once. Prints the probes'
# insert -> `sent` event median and max, what the tenant holds, and (with HOLD seconds more) the worker's claims
# beside the tenant's answers.
#   scripts/measure-slow-tenants.sh [WORKER_BINARY]
# Knobs (environment): ORIGINS (8), SUBSCRIBERS (1000), LATENCY (25), PROBES (20), GAP (0.5), CONCURRENCY (2048,
# the worker's PUSHIZO_CONCURRENCY), HOLD (0), PUSHIZO_TEST_MEASURE_PG_PORT (55437). Nothing leaves loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$(realpath "${1:-.build/release/pushizo-worker}")
origins=${ORIGINS:-8} subscribers=${SUBSCRIBERS:-1000} latency=${LATENCY:-25} probes=${PROBES:-20} gap=${GAP:-0.5}
concurrency=${CONCURRENCY:-2048} hold=${HOLD:-0} port=${PUSHIZO_TEST_MEASURE_PG_PORT:-55437}
work=$(mktemp -d /tmp/pushizo-slow-tenants.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    scripts/pg-throwaway.sh stop "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
bindir=$(dirname "$bin")
. scripts/bench/common.sh
bench_database "$port"
tenant=00000000-0000-4000-8000-0000000510a0
other=00000000-0000-4000-8000-0000000510b0
: >"$work/cas.pem"
# An emulator named $1 answering after $2 seconds; its CA joins the bundle the worker trusts.
start_emulator() {
    "$bin" emulator --emulator-listen 127.0.0.1:0 --emulator-tls-dir "$work/tls-$1" --emulator-webpush-seed slow \
        --emulator-apns-keys "BENCHTEAM1:BENCHKEY01:$work/key.p8" --emulator-latency "$2" \
        --emulator-ready-file "$work/$1.port" --log-level warning 2>"$work/$1.log" &
    pids+=($!)
    for _ in $(seq 1 100); do [ -s "$work/$1.port" ] && break; sleep 0.1; done
    cat "$work/tls-$1/ca.pem" >>"$work/cas.pem"
}
start_emulator fast 0
endpoints=()
for i in $(seq 1 "$origins"); do
    start_emulator "slow$i" "$latency"
    endpoints+=("https://localhost:$(cat "$work/slow$i.port")")
done
# One emulated subscription's keys for all: nothing the slow push services hold is answered within the run.
read -r _ _ p256dh auth < <("$bin" emulator-subscription --seed slow --origin https://localhost:1 slow)
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/vapid.pem" 2>/dev/null
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v tenant="$tenant" -v other="$other" -v p256dh="$p256dh" \
    -v auth="$auth" -v endpoints="$(IFS=,; echo "${endpoints[*]}")" -v n="$subscribers" -v vapid="$(cat "$work/vapid.pem")" \
    -v key="$(cat "$work/key.p8")" -v fast="https://localhost:$(cat "$work/fast.port")" <<'SQL'
INSERT INTO apps (id) VALUES (:'tenant'), (:'other');
INSERT INTO app_channels (app_id, provider, settings)
VALUES (:'tenant', 'webpush', jsonb_build_object('vapid_private_key', :'vapid', 'subject', 'mailto:ops@pushizo.example'));
INSERT INTO app_channels (app_id, provider, settings, endpoint)
VALUES (:'other', 'apns', jsonb_build_object('team_id', 'BENCHTEAM1', 'key_id', 'BENCHKEY01', 'private_key', :'key',
                                               'topic', 'dev.pushizo.bench'), :'fast');
INSERT INTO subscriptions (app_id, platform, token, web_p256dh, web_auth, language)
SELECT :'tenant', 'web', e || '/wpush/slow-' || n, :'p256dh', :'auth', 'en'
FROM generate_series(1, :n) n, unnest(string_to_array(:'endpoints', ',')) e;
INSERT INTO subscriptions (id, app_id, platform, token, language)
SELECT md5('probe' || n)::uuid, :'other', 'ios', 'a1' || md5(n::text) || substr(md5('p' || n), 1, 30), 'en'
FROM generate_series(1, 100) n;
INSERT INTO notifications (app_id, message, target) VALUES (:'tenant', '{"contents": {"en": "hi"}}', '{"all": true}');
SQL
PUSHIZO_CA_FILE=$work/cas.pem PUSHIZO_ALLOW_PRIVATE_NETWORKS=true PUSHIZO_CONCURRENCY=$concurrency PUSHIZO_LOG_LEVEL=notice \
    "$bin" run 2>"$work/worker.log" &
worker=$!
pids+=("$worker")
sleep 5
for i in $(seq 1 "$probes"); do
    psql "$PUSHIZO_DATABASE_URL" -q -c "INSERT INTO notifications (app_id, message, target, campaign_id)
        VALUES ('$other', '{\"contents\": {\"en\": \"probe\"}}',
                jsonb_build_object('include_subscription_ids', jsonb_build_array(md5('probe' || $i)::uuid)), 'probe')"
    sleep "$gap"
done
for _ in $(seq 1 240); do
    sent=$(psql "$PUSHIZO_DATABASE_URL" -Atc "SELECT count(*) FROM delivery_events e JOIN notifications n ON n.id = e.notification_id
                                               WHERE n.campaign_id = 'probe' AND e.event = 'sent'")
    [ "$sent" -ge "$probes" ] && break
    sleep 0.5
done
sleep "$hold"
psql "$PUSHIZO_DATABASE_URL" -At -c "
    SELECT 'other app: ' || count(*) || ' of $probes sent, median ' || round(percentile_cont(0.5) WITHIN GROUP (ORDER BY s)::numeric, 3)
           || ' s, max ' || round(max(s)::numeric, 3) || ' s'
    FROM (SELECT extract(epoch FROM e.at - n.created_at) AS s FROM notifications n
          JOIN delivery_events e ON e.notification_id = n.id AND e.event = 'sent' WHERE n.campaign_id = 'probe') x" \
    -c "SELECT 'tenant: ' || count(*) FILTER (WHERE leased_by IS NOT NULL) || ' held by the worker, '
               || count(*) FILTER (WHERE last_error = 'origin_busy') || ' withdrawn from a busy push service, '
               || (SELECT count(*) FROM delivery_events WHERE app_id = '$tenant') || ' answered'
        FROM deliveries WHERE app_id = '$tenant'"
kill "$worker"; wait "$worker" || true
sed -n 's/.*worker stopped \(claimed=[0-9]*\).*/worker: \1 (every claim of the run, the probes included)/p' "$work/worker.log"
