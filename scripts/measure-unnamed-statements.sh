#!/usr/bin/env bash
# What PUSHIZO_DATABASE_POOLER=transaction costs the claim: the worker's claim/complete SQL
# (scripts/bench/claim-complete.pgbench, batches of 200) run by pgbench as named prepared statements
# (-M prepared, as the worker runs its hot statements) and as unnamed ones (-M extended, parsed and planned on every
# execution, as the worker runs them behind a transaction-mode pooler), alternating, on a throwaway PostgreSQL.
#   scripts/measure-unnamed-statements.sh [PORT] [DELIVERIES] [ROUNDS]
# Prints each round's rate and the mean of each mode's (deliveries a second).
set -euo pipefail
cd "$(dirname "$0")/.."
port=${1:-55439}
deliveries=${2:-40000}
rounds=${3:-3}
dir=$(mktemp -d /tmp/pushizo-unnamed.XXXXXX)
trap 'scripts/pg-throwaway.sh stop "$dir" || true; rm -rf "$dir"' EXIT
url=$(scripts/pg-throwaway.sh start "$dir" "$port")
pgbin=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
for file in migrations/[0-9]*.sql; do psql "$url" -q -v ON_ERROR_STOP=1 -1 -f "$file" >/dev/null; done
psql "$url" -q -v ON_ERROR_STOP=1 -v n="$deliveries" <<'SQL'
INSERT INTO apps (id, default_language) VALUES ('00000000-0000-4000-8000-0000000be4c0', 'en');
INSERT INTO subscriptions (app_id, platform, token, language)
SELECT '00000000-0000-4000-8000-0000000be4c0', 'ios', 'a0' || md5(n::text) || substr(md5('b' || n), 1, 30), 'en'
FROM generate_series(1, :n) n;
INSERT INTO notifications (app_id, message, target, status)
SELECT '00000000-0000-4000-8000-0000000be4c0', '{"contents": {"en": "Bench"}}',
       jsonb_build_object('include_subscription_ids', jsonb_agg(id)), 'expanded'
FROM (SELECT id, (row_number() OVER (ORDER BY id) - 1) / 1000 AS chunk FROM subscriptions) s GROUP BY chunk;
SQL
clients=4
transactions=$(( deliveries / (200 * clients) ))
declare -A total=([prepared]=0 [extended]=0)
for round in $(seq 1 "$rounds"); do
    for mode in prepared extended; do
        psql "$url" -qc "TRUNCATE delivery_events; DELETE FROM deliveries" -c "INSERT INTO deliveries (notification_id, subscription_id, app_id)
            SELECT n.id, s.id, n.app_id FROM notifications n CROSS JOIN LATERAL jsonb_array_elements_text(n.target->'include_subscription_ids') t(sid)
            JOIN subscriptions s ON s.id = t.sid::uuid" -c "VACUUM ANALYZE deliveries" >/dev/null
        tps=$("$pgbin/pgbench" -n -M "$mode" -c "$clients" -j 2 -t "$transactions" -f scripts/bench/claim-complete.pgbench "$url" 2>/dev/null \
            | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
        rate=$(awk -v t="$tps" 'BEGIN { printf "%.0f", t * 200 }')
        total[$mode]=$(( ${total[$mode]} + rate ))
        echo "round $round, $mode: $rate deliveries/s"
    done
done
for mode in prepared extended; do echo "mean $mode: $(( ${total[$mode]} / rounds )) deliveries/s"; done
