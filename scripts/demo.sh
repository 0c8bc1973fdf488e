#!/usr/bin/env bash
# `make demo`: the daemon's main job on embedded defaults, end to end, then everything it started is stopped.
#   throwaway PostgreSQL (var/demo/pg) -> migrate -> emulator over TLS with a generated CA -> seed an app with a
#   generated .p8 key, VAPID key and FCM service-account key, users and iOS / Android / web subscriptions in several languages and time zones -> notifications ->
#   `pushizo-worker run` until the queue is drained -> summary of outcomes + a sample of what the emulator got.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
demo=$root/var/demo
port=${PUSHIZO_DEMO_PG_PORT:-55433}
rm -rf "$demo"
mkdir -p "$demo"

echo "==> building (release)"
swift build -c release 2>&1 | grep -E "error|warning: |Compiling|Build complete" | grep -v "^\[" || true
bin=$(swift build -c release --show-bin-path)/pushizo-worker
[ -x "$bin" ] || { echo "build failed" >&2; exit 1; }

emulator_pid=
cleanup() {
    [ -n "$emulator_pid" ] && kill "$emulator_pid" 2>/dev/null && wait "$emulator_pid" 2>/dev/null || true
    scripts/pg-throwaway.sh stop "$demo/pg" || true
}
trap cleanup EXIT

echo "==> starting a throwaway PostgreSQL in var/demo/pg"
export PUSHIZO_DATABASE_URL=$(scripts/pg-throwaway.sh start "$demo/pg" "$port")
psql_demo() { psql "$PUSHIZO_DATABASE_URL" -v ON_ERROR_STOP=1 -q "$@"; }

echo "==> migrating"
"$bin" migrate --migrations-dir "$root/migrations"

echo "==> generating an APNs signing key (.p8), an FCM service-account key and starting the provider emulator over TLS"
team=DEMOTEAM01
key_id=DEMOKEY001
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$demo/AuthKey_$key_id.p8" 2>/dev/null
openssl pkey -in "$demo/AuthKey_$key_id.p8" -pubout -out "$demo/AuthKey_$key_id.pub.pem" 2>/dev/null
chmod 600 "$demo/AuthKey_$key_id.p8"
fcm_email=demo-worker@pushizo-demo.iam.gserviceaccount.com
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$demo/fcm-service-account.pem" 2>/dev/null
openssl pkey -in "$demo/fcm-service-account.pem" -pubout -out "$demo/fcm-service-account.pub.pem" 2>/dev/null
chmod 600 "$demo/fcm-service-account.pem"
"$bin" emulator --emulator-listen 127.0.0.1:0 --emulator-tls-dir "$demo/tls" \
    --emulator-apns-keys "$team:$key_id:$demo/AuthKey_$key_id.pub.pem" \
    --emulator-request-log "$demo/emulator-requests.jsonl" --emulator-ready-file "$demo/emulator.port" \
    --emulator-webpush-seed pushizo-demo \
    --emulator-fcm-keys "$fcm_email:$demo/fcm-service-account.pub.pem" \
    2>"$demo/emulator.log" &
emulator_pid=$!
for _ in $(seq 1 100); do [ -s "$demo/emulator.port" ] && break; sleep 0.1; done
[ -s "$demo/emulator.port" ] || { echo "emulator did not start:" >&2; cat "$demo/emulator.log" >&2; exit 1; }
emulator_port=$(cat "$demo/emulator.port")
echo "    emulator on https://localhost:$emulator_port (CA: var/demo/tls/ca.pem)"

echo "==> generating a VAPID key and 40 Web Push subscriptions at the emulator (seed pushizo-demo)"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$demo/vapid.pem" 2>/dev/null
chmod 600 "$demo/vapid.pem"
# Ids pick the emulator's answer (docs/emulator.md): e410/e404 gone, e413 too large, e429 rate limited once,
# e503 unavailable once, anything else 201.
web_ids=()
for n in $(seq 1 40); do
    id=$(printf 'w%03d' "$n")
    if ((n % 10 == 0)); then id="e410-$id"; elif ((n % 13 == 0)); then id="e404-$id"; elif ((n == 7)); then id="e413-$id";
    elif ((n == 11)); then id="e429-$id"; elif ((n % 9 == 0)); then id="e503-$id"; fi
    web_ids+=("$id")
done
"$bin" emulator-subscription --seed pushizo-demo --origin "https://localhost:$emulator_port" "${web_ids[@]}" \
    >"$demo/web-subscriptions.tsv"

echo "==> seeding an app, 120 users and 370 subscriptions (275 iOS, 55 Android, 40 web)"
psql_demo -v key="$(cat "$demo/AuthKey_$key_id.p8")" -v team="$team" -v key_id="$key_id" \
    -v endpoint="https://localhost:$emulator_port" -v vapid_key="$(cat "$demo/vapid.pem")" \
    -v web_subscriptions="$(cat "$demo/web-subscriptions.tsv")" \
    -v fcm_key="$(cat "$demo/fcm-service-account.pem")" -v fcm_email="$fcm_email" -f scripts/demo-seed.sql

echo "==> running the worker until the queue is drained, then scraping its Prometheus metrics and stopping it"
# The emulator is on 127.0.0.1: the operator switch lets the worker connect there (never in production).
# Metrics on a port the kernel picks (the worker logs it). The worker runs as a service does (no
# --exit-when-drained): once nothing is queued or waiting for expansion, one scrape sees every outcome, and
# SIGTERM stops it as systemd would.
PUSHIZO_CA_FILE=$demo/tls/ca.pem PUSHIZO_RETRY_BASE=0.5 PUSHIZO_POLL_INTERVAL=0.2 PUSHIZO_ALLOW_PRIVATE_NETWORKS=true \
    PUSHIZO_METRICS_LISTEN=127.0.0.1:0 "$bin" run 2>"$demo/worker.log" &
worker_pid=$!
drained() {
    [ "$(psql_demo -Atc "SELECT (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM notifications WHERE status IN ('pending', 'expanding'))")" = 0 ]
}
for _ in $(seq 1 1200); do
    kill -0 "$worker_pid" 2>/dev/null || break
    drained && break
    sleep 0.1
done
metrics_port=$(sed -n 's/.*metrics listening.* port=\([0-9]*\).*/\1/p' "$demo/worker.log" | head -n 1)
[ -n "$metrics_port" ] && curl -sf "http://127.0.0.1:$metrics_port/metrics" -o "$demo/metrics.txt" 2>/dev/null || true
kill -TERM "$worker_pid" 2>/dev/null || true
wait "$worker_pid" || { tail -n 30 "$demo/worker.log" >&2; exit 1; }
grep -E "worker (running|stopped)|notification (expanded|failed)" "$demo/worker.log" | sed 's/^<[0-9]>/    /' || true
if [ -s "$demo/metrics.txt" ]; then
    echo "==> the metrics scrape once drained (var/demo/metrics.txt; docs/metrics.md): outcomes by provider and reason"
    grep -E '^pushizo_deliveries_total' "$demo/metrics.txt" | sed 's/^/    /' || true
    if command -v promtool >/dev/null; then
        promtool check metrics <"$demo/metrics.txt" && echo "    promtool check metrics: ok"
    fi
fi

echo
echo "==> summary"
echo "    The seed is deterministic: the same counts every run. By design some deliveries fail: tokens the"
echo "    emulator rejects (0410 Unregistered, 0400 BadDeviceToken, 0403 DeviceTokenNotForTopic), 0503 tokens"
echo "    that fail once and are retried, a notification whose message"
echo "    is invalid (expanded, each delivery failed/invalid_message) and one whose target is invalid (failed"
echo "    before expansion, no deliveries). Web subscriptions: e410/e404 ids are gone (invalidated), e413 is"
echo "    too large, e429 and e503 are retried once, the rest are encrypted, VAPID-signed and decrypted by the"
echo "    emulator. Android: the worker gets an OAuth2 token from the emulator's token endpoint (JWT-bearer"
echo "    grant signed with the service-account key) and sends FCM v1 data messages; fcm-unregistered,"
echo "    fcm-invalid tokens are invalidated, fcm-sender-mismatch ones once a send proved the account,"
echo "    fcm-quota and fcm-unavailable are retried once. The tables below count deliveries, except the"
echo "    subscriptions table, which counts subscriptions (one can fail for two notifications); the metrics"
echo "    above count every attempt, retries included."
psql_demo -P pager=off -f scripts/demo-summary.sql
echo "==> what the emulator received (2 APNs, 1 FCM and 1 decrypted Web Push of $(wc -l <"$demo/emulator-requests.jsonl") accepted requests)"
grep -v -e '"provider":"webpush"' -e '"provider":"fcm"' "$demo/emulator-requests.jsonl" | head -n 2 || true
grep '"provider":"fcm"' "$demo/emulator-requests.jsonl" | head -n 1 || true
grep '"provider":"webpush"' "$demo/emulator-requests.jsonl" | head -n 1 || true
echo
echo "demo finished: worker log var/demo/worker.log, emulator log var/demo/emulator.log"
