#!/usr/bin/env bash
# Measures what docs/egress.md ("Bounded lookups") and docs/security.md ("What is left") report about names whose
# DNS never answers: one app's Web Push subscriptions at such names, and another app's pushes to a healthy push
# service the worker has no connection to yet, in three rounds (5 s, 35 s and 65 s after the first app's
# broadcast), each to an emulator of its own.
#   scripts/measure-dns-shares.sh [WORKER_BINARY] [NAMES] [DOMAINS] [APPS]
# NAMES subscriptions (default 200) at h<i>.slow<i % DOMAINS>.example (DOMAINS registrable domains, default 1),
# dealt out to APPS apps (default 1).
# Run as root: the worker runs in a mount namespace of its own (unshare -m) whose /etc/resolv.conf names one DNS
# server, a Python socket on 127.53.0.1:53 that reads every query and answers none (glibc's defaults: 5 s per
# try, 2 tries). The emulators are `localhost` (/etc/hosts: no DNS). Nothing leaves loopback. PostgreSQL is a
# throwaway cluster on PUSHIZO_TEST_MEASURE_PG_PORT (default 55435).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-.build/release/pushizo-worker}")
names=${2:-200}
domains=${3:-1}
apps=${4:-1}
port=${PUSHIZO_TEST_MEASURE_PG_PORT:-55435}
[ "$(id -u)" = 0 ] || { echo "measure-dns-shares: run as root (unshare -m, a DNS server on port 53)" >&2; exit 1; }
dir=$(mktemp -d /tmp/pushizo-dns-shares.XXXXXX)
chmod 755 "$dir"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    scripts/pg-throwaway.sh stop "$dir/pg" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT

export PUSHIZO_DATABASE_URL
PUSHIZO_DATABASE_URL=$(scripts/pg-throwaway.sh start "$dir/pg" "$port")
PUSHIZO_MIGRATIONS_DIR=$PWD/migrations "$bin" migrate >/dev/null 2>&1
sql() { psql "$PUSHIZO_DATABASE_URL" -qAtX -v ON_ERROR_STOP=1 "$@"; }

python3 - "$dir/dns.log" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.53.0.1", 53))
with open(sys.argv[1], "a", buffering=1) as log:
    while True:
        data, _ = s.recvfrom(1500)
        labels, i = [], 12
        while i < len(data) and data[i]:
            labels.append(data[i + 1:i + 1 + data[i]].decode(errors="replace")); i += 1 + data[i]
        log.write(".".join(labels) + "\n")
PY
pids+=($!)
printf 'nameserver 127.53.0.1\n' >"$dir/resolv.conf"

for round in 1 2 3; do
    "$bin" emulator --emulator-listen 127.0.0.1:0 --emulator-tls-dir "$dir/tls" --emulator-webpush-seed measure \
        --emulator-ready-file "$dir/emulator$round.port" 2>"$dir/emulator$round.log" &
    pids+=($!)
    for _ in $(seq 1 100); do [ -s "$dir/emulator$round.port" ] && break; sleep 0.1; done
done
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/vapid.pem" 2>/dev/null
app() { printf '00000000-0000-4000-8000-%012d' "$1"; }
channel() {
    sql -v app="$(app "$1")" -v key="$(cat "$dir/vapid.pem")" <<'SQL'
INSERT INTO apps (id) VALUES (:'app');
INSERT INTO app_channels (app_id, provider, settings)
VALUES (:'app', 'webpush', jsonb_build_object('vapid_private_key', :'key', 'subject', 'mailto:ops@pushizo.example'));
SQL
}
# Apps 101 and on: subscriptions at names whose DNS never answers (valid keys, so each reaches the lookup).
keys=$("$bin" emulator-subscription --seed measure --origin https://localhost probe | cut -f3,4)
for hostile in $(seq 1 "$apps"); do
    channel $((100 + hostile))
    sql -v app="$(app $((100 + hostile)))" -v p256dh="$(cut -f1 <<<"$keys")" -v auth="$(cut -f2 <<<"$keys")" <<SQL
INSERT INTO subscriptions (app_id, platform, token, web_p256dh, web_auth)
SELECT :'app', 'web', format('https://h%s.slow%s.example/push/%s', n, n % $domains, n), :'p256dh', :'auth'
FROM generate_series(1, $names) AS n WHERE n % $apps = $hostile - 1;
SQL
done
# Apps 2-4: 20 subscriptions each at emulator 1-3.
for round in 1 2 3; do
    channel $((round + 1))
    "$bin" emulator-subscription --seed measure --origin "https://localhost:$(cat "$dir/emulator$round.port")" \
        $(seq -f "probe-$round-%g" 1 20) >"$dir/probes$round.tsv"
    sql -v app="$(app $((round + 1)))" -v rows="$(cat "$dir/probes$round.tsv")" <<'SQL'
INSERT INTO subscriptions (app_id, platform, token, web_p256dh, web_auth)
SELECT :'app', 'web', split_part(line, E'\t', 2), split_part(line, E'\t', 3), split_part(line, E'\t', 4)
FROM regexp_split_to_table(:'rows', E'\n') AS line WHERE line <> '';
SQL
done

unshare -m sh -c 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"' sh "$dir/resolv.conf" \
    env PUSHIZO_CA_FILE="$dir/tls/ca.pem" PUSHIZO_ALLOW_PRIVATE_NETWORKS=true PUSHIZO_LOG_LEVEL=error \
    "$bin" run 2>"$dir/worker.log" &
worker=$!
pids+=($worker)
sleep 2
wait_until() { while [ "$(date +%s)" -lt "$1" ]; do sleep 0.2; done; }
start=$(date +%s)
for hostile in $(seq 1 "$apps"); do
    sql -c "INSERT INTO notifications (app_id, message, target) VALUES ('$(app $((100 + hostile)))', '{\"contents\": {\"en\": \"hi\"}}', '{\"all\": true}')"
done
for round in 1 2 3; do
    wait_until $((start + 5 + (round - 1) * 30))
    sql -c "INSERT INTO notifications (app_id, message, target) VALUES ('$(app $((round + 1)))', '{\"contents\": {\"en\": \"probe\"}}', '{\"all\": true}')"
done
wait_until $((start + 95))
# unshare, sh and env exec one another: $worker is the worker's pid.
threads=$(grep -l pushizo-dns /proc/"$worker"/task/*/comm 2>/dev/null | wc -l || true)
echo "$names subscriptions under $domains registrable domain(s) in $apps app(s); worker: $bin"
echo "names the DNS server was asked for (never answered): $(sort -u "$dir/dns.log" | wc -l), queries $(wc -l <"$dir/dns.log"); pushizo-dns threads: $threads"
for round in 1 2 3; do
    sql -F ' ' <<SQL | awk -v r="$round" '{ printf "round %s (t=%s s): %s of 20 sent within 30 s; insert -> sent p50 %s s, max %s s\n", r, 5 + (r - 1) * 30, $1, $2, $3 }'
SELECT count(*) FILTER (WHERE e.at - n.created_at <= interval '30 s'),
       coalesce(round(extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY e.at - n.created_at))::numeric, 2)::text, '-'),
       coalesce(round(extract(epoch FROM max(e.at - n.created_at))::numeric, 2)::text, '-')
FROM notifications n JOIN delivery_events e ON e.notification_id = n.id AND e.event = 'sent'
WHERE n.app_id = '$(app $((round + 1)))';
SQL
done
echo "those $names subscriptions by their last event:"
sql -F ' ' -c "SELECT coalesce(event || '/' || reason, event), count(*) FROM (SELECT DISTINCT ON (subscription_id) event, reason FROM delivery_events WHERE app_id > '$(app 100)' ORDER BY subscription_id, id DESC) s GROUP BY 1 ORDER BY 2 DESC" | sed 's/^/  /'
