#!/usr/bin/env bash
# `make bench`: the performance targets as ratios measured in one run, on this machine, against baselines
# run on the same server in the same run. Prints ratios, never pass/fail timings.
#   1. transport: APNs-sized POSTs (3.9 KB) over 1 connection x 100 streams to nghttpd (h2c):
#      pushizo-bench (the worker's HTTP/2 client, handed batches as the worker hands them) vs h2load,
#      median of five interleaved rounds; one `send` per request printed beside it.   target >= 0.8x
#   2. end to end: notifications rows -> worker -> APNs emulator (TLS) -> events, vs pgbench running the
#      worker's claim/complete SQL alone on the same PostgreSQL, in two alternating pairs (the mean rates).
#                                                                                  target >= 0.5x
#      100,000 deliveries (100 notifications of 1,000 listed subscriptions): about 4 s of the worker, so that
#      its start-up (exec, connections, the first expansion page, the TLS handshake: about 0.1 s) weighs as
#      little beside its throughput as pgbench's, whose rate excludes its connection time. With 20,000 the run
#      lasted about a second and start-up was a tenth of it.
#      Printed beside: the CPU each side spends a delivery (PostgreSQL, the worker, the APNs stand-in; PostgreSQL
#      and pgbench), whose ratio bounds the rates' on busy cores, and the same pairs again with PostgreSQL on a
#      core of its own (taskset), as in a deployment whose database has its own host.
#      Each pair also runs the floor (scripts/bench/event-floor.pgbench): the same deliveries' events alone, in
#      batches of the worker's mean completion batch; the worker's database CPU per delivery is printed as a
#      multiple of the floor's per event.                                               target <= 2.5x
#      Then one more run of the worker with pg_stat_statements and pg_stat_kcache counting every statement, nested
#      ones included: the statements by CPU time (PUSHIZO_BENCH_STATEMENTS of them, default 20), also written to
#      var/bench/statements.txt.
#   3. the worker's peak RSS during (2).                                          target < 150 MB
#   4. expansion of 1,000,000 subscriptions into deliveries ({"all": true}).     target < 10 s
#   5. transactional: one-device notifications inserted by pgbench at steady rates (1k, 2k, 5k, 6k, 7k, 8k/s,
#      15 s each): the highest rate whose every notification is delivered within 3 s of the last insert
#      (target >= 5,000/s); insert (created_at) -> emulator receipt p50/p99 at 1,000/s (target p99 < 50 ms);
#      the worker's and PostgreSQL's CPU per notification at each step; a burst of 20,000 drained by the worker
#      vs pgbench running the same SQL alone.
#   6. the worker's CPU time (user + sys) per sent delivery on a 100,000-delivery broadcast and on 10,000
#      one-device notifications (scripts/bench/cpu-per-delivery.sh).            target <= 20 µs
#   7. queue depth and workers (scripts/bench/queue-scale.sh): one worker's rate over 100,000 deliveries of a
#      10,000,000-delivery queue vs a 100,000-delivery queue's (target >= 0.8x), and 1, 2 and 4 workers
#      draining 100,000 deliveries side by side on the same database (rate vs 1 worker's).
#   8. fairness (scripts/bench/fairness.sh): another app's one-device notifications (50/s) while a 1,000,000-device
#      broadcast drains: their insert -> emulator receipt p99 (target < 100 ms), and the broadcast's rate beside
#      them vs alone (target >= 0.9x).
# Everything is also written as JSON to var/bench-<UTC time>.json (and var/bench/results.json).
# Its knobs are PUSHIZO_BENCH_* variables, a prefix the worker reserves and ignores (README, Configuration).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/var/bench
deliveries=${PUSHIZO_BENCH_DELIVERIES:-100000}
expansion_size=${PUSHIZO_BENCH_EXPANSION:-1000000}
steady_rates=${PUSHIZO_BENCH_STEADY_RATES:-1000 2000 5000 6000 7000 8000}
steady_seconds=${PUSHIZO_BENCH_STEADY_SECONDS:-15}
steady_grace=${PUSHIZO_BENCH_STEADY_GRACE:-3}
steady_devices=${PUSHIZO_BENCH_STEADY_DEVICES:-20000}
burst=${PUSHIZO_BENCH_BURST:-20000}
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
# Rounds (PUSHIZO_BENCH_TRANSPORT_ROUNDS, default 5), each h2load then the client two ways, so that each ratio
# compares runs seconds apart; the medians are reported (on a shared 2-core machine one run of either side can be
# off by a third; with three rounds the median moved between 0.79x and 0.98x from one run to the next).
transport_rounds=${PUSHIZO_BENCH_TRANSPORT_ROUNDS:-5}
#   submit 25: the way the worker hands the client claimed batches (HTTP2Client.submit, each answer taken on the
#              I/O thread as it arrives, as the worker judges it there): 25 more each time 25 have been
#              answered, never more than 100 outstanding, as with h2load -m 100;
#   one send:  one `send` per request from 100 tasks.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
rps_of() { sed -n 's/requests_per_second=\([0-9]*\).*/\1/p'; }
h2load_runs=(); submit_runs=(); one_runs=(); submit_ratios=(); one_ratios=()
for round in $(seq 1 "$transport_rounds"); do
    h=$(h2load -n 50000 -c 1 -m 100 -d "$work/body.bin" "$url" 2>&1 | sed -n 's/.*finished in .*, \([0-9.]*\) req\/s.*/\1/p')
    sub=$("$bindir/pushizo-bench" transport "$url" --requests 50000 --streams 100 --submit 25 --body "$work/body.bin" | rps_of)
    one=$("$bindir/pushizo-bench" transport "$url" --requests 50000 --streams 100 --body "$work/body.bin" | rps_of)
    echo "    round $round: h2load $h req/s, pushizo-bench submit 25: $sub req/s, one send per request: $one req/s"
    h2load_runs+=("$h"); submit_runs+=("$sub"); one_runs+=("$one")
    submit_ratios+=("$(calc "$sub / $h")"); one_ratios+=("$(calc "$one / $h")")
done
h2load_rps=$(median "${h2load_runs[@]}"); submit_rps=$(median "${submit_runs[@]}"); ours_rps=$(median "${one_runs[@]}")
submit_ratio=$(median "${submit_ratios[@]}"); one_ratio=$(median "${one_ratios[@]}")
echo "    medians: h2load $h2load_rps req/s, submit 25 $submit_rps req/s (${submit_ratio}x), one send $ours_rps req/s (${one_ratio}x)"

echo "==> 2. end to end: $deliveries deliveries (3. the worker's peak RSS during it)"
. scripts/bench/common.sh
bench_database "$pg_port"
# Loaded, counting nothing, until the statements run below (common.sh).
bench_statements_enable "$pg_port"
# PUSHIZO_BENCH_SLOW_MS: statements of sections 2-4 slower than this are logged with their plans (auto_explain,
# without ANALYZE, so the statements run as fast as otherwise), and lock waits longer than a second, in
# var/bench/pg/postgres.log.
if [ -n "${PUSHIZO_BENCH_SLOW_MS:-}" ]; then
    psql "$PUSHIZO_DATABASE_URL" -q -c "LOAD 'auto_explain'" -c "ALTER SYSTEM SET session_preload_libraries = 'auto_explain'" \
        -c "ALTER SYSTEM SET auto_explain.log_min_duration = ${PUSHIZO_BENCH_SLOW_MS}" \
        -c "ALTER SYSTEM SET auto_explain.log_nested_statements = on" -c "ALTER SYSTEM SET log_lock_waits = on" \
        -c "SELECT pg_reload_conf()" >/dev/null
fi
bench_emulator emulator
pids+=("$emulator_pid")
bench_apns_app 00000000-0000-4000-8000-0000000be4c0 emulator
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$deliveries" <<'SQL'
INSERT INTO subscriptions (app_id, platform, token, language)
SELECT '00000000-0000-4000-8000-0000000be4c0', 'ios', 'a0' || md5(n::text) || substr(md5('b' || n), 1, 30),
       (ARRAY['en', 'tr', 'de'])[1 + n % 3]
FROM generate_series(1, :n) n;
SQL
# Alternating pairs (PUSHIZO_BENCH_E2E_PAIRS, default 2): the worker, then pgbench, each on the same deliveries;
# the ratio is that of the mean rates. On a shared 2-core machine one run of either side can be off by a fifth,
# and the two sides of a pair run seconds apart.
e2e_pairs=${PUSHIZO_BENCH_E2E_PAIRS:-2}
clients=4
transactions=$(( deliveries / (200 * clients) ))
clock_ticks=$(getconf CLK_TCK)
# Sections 2-5 share this server (pg_ticks, common.sh, counts its whole CPU).
postmaster=$(head -n 1 "$work/pg/data/postmaster.pid")
# Waits (up to 5 s) until no client backend is left, not even one that has exited but is not yet reaped: a
# backend's ticks move to the postmaster's reaped-children count only when it is reaped, so a psql that just
# filled the queue would otherwise land its CPU in the next measurement (10-15 µs a job, seen).
pg_clients_gone() {
    local child command
    for _ in $(seq 1 500); do
        local busy=0
        for child in $(pgrep -P "$postmaster"); do
            # A client backend's title names its client ("[local]" or an address); a zombie's is empty. One gone
            # from /proc was reaped: the next round no longer lists it.
            command=$( (tr '\0' ' ' <"/proc/$child/cmdline") 2>/dev/null || true)
            case $command in
                "" | *"[local]"* | *"127.0.0.1"*) busy=1 ;;
            esac
        done
        [ "$busy" = 0 ] && return 0
        sleep 0.01
    done
}
# Microseconds of CPU per item: $1 ticks over $2 items.
ticks_us() { calc "$1 * 1000000 / $clock_ticks / ($2 + ($2 == 0))"; }
# bash's `time` below prints the user and system seconds.
TIMEFORMAT='%U %S'
# The worker drains the 100 notifications. $1 names the run in the log; the rest is a command prefix for the
# worker (empty, or a taskset). Sets pair_worker_jps, the CPU per delivery of each process and
# pair_completion_batch, the mean size of the worker's completion batches (its events of one statement share their
# `at`, the statement's transaction start). With e2e_statements set, pg_stat_statements counts the run's statements
# into the table bench_statements.
e2e_worker() {
    local name=$1
    shift
    # 1,000 subscriptions per notification; the previous pair's rows gone (deleting a notification deletes its
    # deliveries) and vacuumed, as pgbench's queue is before it drains.
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 <<'SQL'
TRUNCATE delivery_events;
DELETE FROM notifications;
VACUUM ANALYZE deliveries;
VACUUM notifications;
INSERT INTO notifications (app_id, message, target)
SELECT '00000000-0000-4000-8000-0000000be4c0',
       '{"headings": {"en": "Bench", "tr": "Ölçüm"}, "contents": {"en": "A notification of ordinary size for a benchmark run", "tr": "Sıradan boyutta bir bildirim"}, "data": {"k": "v"}}',
       jsonb_build_object('include_subscription_ids', jsonb_agg(id))
FROM (SELECT id, (row_number() OVER (ORDER BY id) - 1) / 1000 AS chunk FROM subscriptions) s GROUP BY chunk;
SQL
    if [ -n "${e2e_statements:-}" ]; then bench_statements_reset; fi
    local pg0 pg1 emulator0 emulator1 worker_cpu started finished rss steady_jps sent
    pg_clients_gone; pg0=$(pg_ticks); emulator0=$(process_ticks "$emulator_pid")
    started=$(date +%s.%N)
    # PUSHIZO_BENCH_WRAPPER profiles the worker, e.g. "perf record -g -o /tmp/perf.data".
    # The emulator is on 127.0.0.1: the operator switch lets the worker connect there (never in production).
    worker_cpu=$( { time "$@" env PUSHIZO_CA_FILE="$work/tls/ca.pem" PUSHIZO_POLL_INTERVAL=0.05 PUSHIZO_ALLOW_PRIVATE_NETWORKS=true \
        ${PUSHIZO_BENCH_WRAPPER:-} "$bindir/pushizo-worker" run --exit-when-drained 2>"$work/worker-$name.log"; } 2>&1 )
    finished=$(date +%s.%N)
    pg_clients_gone; pg1=$(pg_ticks); emulator1=$(process_ticks "$emulator_pid")
    if [ -n "${e2e_statements:-}" ]; then bench_statements_snapshot bench_statements; fi
    sent=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM delivery_events WHERE event = 'sent'")
    pair_completion_batch=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT round(count(*)::numeric / greatest(count(DISTINCT at), 1)) FROM delivery_events")
    pair_worker_sent=$sent
    pair_worker_jps=$(calc "$sent / ($finished - $started)")
    pair_worker_pg_us=$(ticks_us "$(( pg1 - pg0 ))" "$sent")
    # The share of one core PostgreSQL kept busy over the run, in percent.
    pair_worker_pg_busy=$(calc "($pg1 - $pg0) * 100 / $clock_ticks / ($finished - $started)")
    pair_emulator_us=$(ticks_us "$(( emulator1 - emulator0 ))" "$sent")
    pair_worker_us=$(calc "($(tr ' ' + <<<"$worker_cpu")) * 1000000 / ($sent + ($sent == 0))")
    rss=$(sed -n 's/.*peak_rss_mb=\([0-9]*\).*/\1/p' "$work/worker-$name.log" | tail -n 1)
    if [ "${rss:-0}" -gt "$peak_rss" ]; then peak_rss=$rss; fi
    steady_jps=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT round(count(*) / greatest(extract(epoch FROM max(at) - min(at)), 0.001)) FROM delivery_events WHERE event = 'sent'")
    echo "    $name, worker: $sent sent in $(calc "$finished - $started") s, start-up and expansion included ($(printf %.0f "$pair_worker_jps")/s; $steady_jps/s between the first and last event; completions in batches of $pair_completion_batch on average); CPU a delivery: PostgreSQL $(printf %.1f "$pair_worker_pg_us") µs, the worker $(printf %.1f "$pair_worker_us"), the APNs stand-in $(printf %.1f "$pair_emulator_us")"
}

# The same claim/complete SQL alone: refill the queue with the same deliveries and let pgbench drain it.
# Prepared (-M prepared), as the worker runs its hot statements: each is planned once per connection. $1 names the
# run; the rest is a command prefix for pgbench. Sets pair_pgbench_jps and the CPU per job of each process.
e2e_pgbench() {
    local name=$1
    shift
    psql "$PUSHIZO_DATABASE_URL" -qc "TRUNCATE delivery_events; INSERT INTO deliveries (notification_id, subscription_id, app_id)
        SELECT n.id, s.id, n.app_id FROM notifications n CROSS JOIN LATERAL jsonb_array_elements_text(n.target->'include_subscription_ids') t(sid)
        JOIN subscriptions s ON s.id = t.sid::uuid" -c "VACUUM ANALYZE deliveries"
    local pgbench_out pgbench_cpu pgbench_tps pg0
    pg_clients_gone; pg0=$(pg_ticks)
    pgbench_out=$( { time "$@" "$pgbin/pgbench" -n -M prepared -c "$clients" -j 2 -t "$transactions" -f scripts/bench/claim-complete.pgbench \
        "$PUSHIZO_DATABASE_URL" 2>/dev/null; } 2>&1 )
    pgbench_cpu=$(tail -n 1 <<<"$pgbench_out")
    pgbench_tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$pgbench_out")
    pair_pgbench_jps=$(calc "$pgbench_tps * 200")
    pg_clients_gone; pair_pgbench_pg_us=$(ticks_us "$(( $(pg_ticks) - pg0 ))" "$deliveries")
    pair_pgbench_us=$(calc "($(tr ' ' + <<<"$pgbench_cpu")) * 1000000 / $deliveries")
    echo "    $name, pgbench (claim/complete SQL alone, $clients clients, batches of 200): $(printf %.0f "$pair_pgbench_jps") jobs/s ($(calc "$pair_worker_jps / $pair_pgbench_jps")x); CPU a job: PostgreSQL $(printf %.1f "$pair_pgbench_pg_us") µs, pgbench $(printf %.1f "$pair_pgbench_us")"
}

# The floor: the same deliveries' events and nothing else (scripts/bench/event-floor.pgbench), in batches of $2
# rows (the worker's mean completion batch), one pgbench client, as the worker has one completion writer. $1
# names the run; the rest is a command prefix for pgbench. Sets pair_floor_us, PostgreSQL's CPU per event.
event_floor() {
    local name=$1 batch=$2
    shift 2
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v batch="$batch" -f scripts/bench/event-floor-batches.sql
    local batches pg0 pg1 events
    batches=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM event_floor_batches")
    pg_clients_gone; pg0=$(pg_ticks)
    "$@" "$pgbin/pgbench" -n -M prepared -c 1 -j 1 -t "$batches" -f scripts/bench/event-floor.pgbench "$PUSHIZO_DATABASE_URL" >/dev/null 2>&1
    pg_clients_gone; pg1=$(pg_ticks)
    events=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM delivery_events")
    pair_floor_us=$(ticks_us "$(( pg1 - pg0 ))" "$events")
    echo "    $name, the floor (the events alone: $events in $batches batches of $batch, 1 client): CPU an event: PostgreSQL $(printf %.1f "$pair_floor_us") µs"
}

# One pair: the worker, then pgbench on the same deliveries, then the floor at the worker's batch size. $1 names
# the pair in the log; the rest is a command prefix for the worker and pgbench (empty, or a taskset).
e2e_pair() {
    e2e_worker "$@"
    e2e_pgbench "$@"
    local name=$1
    shift
    event_floor "$name" "$pair_completion_batch" "$@"
}
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.4f", s / NR }'; }
worker_runs=(); pgbench_runs=(); peak_rss=0
worker_pg_us=(); worker_own_us=(); emulator_us=(); pgbench_pg_us=(); pgbench_own_us=(); floor_us=(); floor_batches=()
for pair in $(seq 1 "$e2e_pairs"); do
    e2e_pair "pair $pair"
    worker_runs+=("$pair_worker_jps"); pgbench_runs+=("$pair_pgbench_jps")
    worker_pg_us+=("$pair_worker_pg_us"); worker_own_us+=("$pair_worker_us"); emulator_us+=("$pair_emulator_us")
    pgbench_pg_us+=("$pair_pgbench_pg_us"); pgbench_own_us+=("$pair_pgbench_us")
    floor_us+=("$pair_floor_us"); floor_batches+=("$pair_completion_batch")
done
worker_jps=$(mean "${worker_runs[@]}"); pgbench_jps=$(mean "${pgbench_runs[@]}")
echo "    means: worker $(printf %.0f "$worker_jps")/s, pgbench $(printf %.0f "$pgbench_jps") jobs/s ($(calc "$worker_jps / $pgbench_jps")x)"
# What the machine spends on one delivery either way. When both sides keep the machine equally busy (and nothing
# else runs), the ratio of the rates is the inverse ratio of these sums: the worker's job includes the expansion
# of each list (an insert into the queue, which pgbench's queue had before it started) and the provider's side,
# here the stand-in on the same cores.
e2e_worker_cpu_us=$(calc "$(mean "${worker_pg_us[@]}") + $(mean "${worker_own_us[@]}") + $(mean "${emulator_us[@]}")")
e2e_pgbench_cpu_us=$(calc "$(mean "${pgbench_pg_us[@]}") + $(mean "${pgbench_own_us[@]}")")
echo "    CPU a delivery, all processes: the worker's job $(printf %.1f "$e2e_worker_cpu_us") µs (PostgreSQL $(printf %.1f "$(mean "${worker_pg_us[@]}")"), the worker $(printf %.1f "$(mean "${worker_own_us[@]}")"), the stand-in $(printf %.1f "$(mean "${emulator_us[@]}")")); pgbench's $(printf %.1f "$e2e_pgbench_cpu_us") µs (PostgreSQL $(printf %.1f "$(mean "${pgbench_pg_us[@]}")"), pgbench $(printf %.1f "$(mean "${pgbench_own_us[@]}")")): CPU cost ratio $(calc "$e2e_pgbench_cpu_us / $e2e_worker_cpu_us")x"
# The database's CPU per broadcast delivery against the floor of the same pairs: what every delivery must leave
# behind (its event) written alone, in batches of the worker's size.
worker_pg_mean_us=$(mean "${worker_pg_us[@]}"); floor_mean_us=$(mean "${floor_us[@]}")
floor_ratio=$(calc "$worker_pg_mean_us / $floor_mean_us")
floor_verdict=$(awk "BEGIN { print ($floor_ratio <= 2.5) ? \"met\" : \"not met\" }")
echo "    database CPU per delivery: $(printf %.1f "$worker_pg_mean_us") µs = $(printf %.1f "$floor_ratio")x the floor of $(printf %.1f "$floor_mean_us") µs (the events alone, batches of $(IFS=/; echo "${floor_batches[*]}"); 2.5x target: $floor_verdict)"

# One more broadcast run, the worker alone, with pg_stat_statements and pg_stat_kcache counting every statement
# (track = all: the triggers' and functions' statements too; planning included): where the database's CPU per
# delivery goes.
# Counting costs the server a little CPU of its own, so this run is kept out of the means above.
e2e_statements=1 e2e_worker "statements run"
statements_pg_us=$pair_worker_pg_us
echo "    the statements run's statements by CPU time (pg_stat_kcache; execution and planning; per row of the statement's own rows, per delivery of $pair_worker_sent):"
bench_statements_table bench_statements "$pair_worker_sent" "${PUSHIZO_BENCH_STATEMENTS:-20}" | tee "$work/statements.txt" | sed 's/^/    /'

# The same pairs with PostgreSQL on a core of its own (PUSHIZO_BENCH_E2E_OWN_CORE_PAIRS, default 2; 0 skips):
# the postmaster and every backend on CPU 0, the worker, the stand-in and pgbench on the others, as in a
# deployment whose database has its own host (the stand-in still shares the worker's core). Both sides get the
# same one core of PostgreSQL; when the worker's runs keep that core busy (printed), the worker drains as fast as
# the database serves its whole job, and the ratio is the database's CPU per job for pgbench over the worker's.
# Other processes on the machine are not kept off that core.
own_core_pairs=${PUSHIZO_BENCH_E2E_OWN_CORE_PAIRS:-2}
own_core_worker_jps=null; own_core_pgbench_jps=null; own_core_ratio=null; own_busy=()
pin_postgres() {
    # A backend may exit between the listing and its taskset; the postmaster's own list is checked below.
    for pid in "$postmaster" $(pgrep -P "$postmaster"); do taskset -a -p -c "$1" "$pid" >/dev/null 2>&1 || true; done
}
if [ "$(nproc)" -ge 2 ] && [ "$own_core_pairs" -gt 0 ]; then
    others=1-$(( $(nproc) - 1 ))
    pin_postgres 0
    taskset -a -p -c "$others" "$emulator_pid" >/dev/null
    if [ "$(taskset -c -p "$postmaster" | sed 's/.*: *//')" != 0 ]; then
        echo "    PostgreSQL could not be pinned to CPU 0 (taskset: $(taskset -c -p "$postmaster")): the pairs on a core of its own are skipped"
        own_core_pairs=0
    fi
    own_worker_runs=(); own_pgbench_runs=()
    for pair in $(seq 1 "$own_core_pairs"); do
        e2e_pair "PostgreSQL on CPU 0, pair $pair" taskset -c "$others"
        own_worker_runs+=("$pair_worker_jps"); own_pgbench_runs+=("$pair_pgbench_jps"); own_busy+=("$(printf %.0f "$pair_worker_pg_busy")")
    done
    all=0-$(( $(nproc) - 1 ))
    pin_postgres "$all"
    taskset -a -p -c "$all" "$emulator_pid" >/dev/null
    if [ "$own_core_pairs" -gt 0 ]; then
        own_core_worker_jps=$(mean "${own_worker_runs[@]}"); own_core_pgbench_jps=$(mean "${own_pgbench_runs[@]}")
        own_core_ratio=$(calc "$own_core_worker_jps / $own_core_pgbench_jps")
        own_core_busy=$(IFS=/; echo "${own_busy[*]}")
        echo "    means, PostgreSQL on a core of its own: worker $(printf %.0f "$own_core_worker_jps")/s, pgbench $(printf %.0f "$own_core_pgbench_jps") jobs/s (${own_core_ratio}x)"
    fi
fi

echo "==> 4. expansion of $expansion_size subscriptions ({\"all\": true}) by an expand-only worker"
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

echo "==> 5. transactional: one-device notifications inserted at a steady rate by pgbench (--rate), one worker"
# A second emulator for this section, writing every accepted request with its receipt time ("at", ms).
"$bindir/pushizo-worker" emulator --emulator-listen 127.0.0.1:0 --emulator-tls-dir "$work/tls" \
    --emulator-apns-keys "BENCHTEAM1:BENCHKEY01:$work/key.p8" --emulator-ready-file "$work/emulator-steady.port" \
    --emulator-request-log "$work/steady-requests.jsonl" --log-level warning 2>"$work/emulator-steady.log" &
steady_emulator=$!
pids+=($steady_emulator)
for _ in $(seq 1 100); do [ -s "$work/emulator-steady.port" ] && break; sleep 0.1; done
# Section 3 left its million deliveries queued (an expand-only run): not this section's work.
psql "$PUSHIZO_DATABASE_URL" -qc "TRUNCATE deliveries, delivery_events" -c "VACUUM ANALYZE deliveries"
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v key="$(cat "$work/key.p8")" \
    -v endpoint="https://localhost:$(cat "$work/emulator-steady.port")" -v n="$steady_devices" <<'SQL'
INSERT INTO apps (id, default_language) VALUES ('00000000-0000-4000-8000-00000000057d', 'en');
INSERT INTO app_channels (app_id, provider, settings, endpoint)
VALUES ('00000000-0000-4000-8000-00000000057d', 'apns',
        jsonb_build_object('team_id', 'BENCHTEAM1', 'key_id', 'BENCHKEY01', 'private_key', :'key', 'topic', 'dev.pushizo.bench'),
        :'endpoint');
-- Deterministic ids (md5('t' || n)), so the producer's script names a device without a lookup.
INSERT INTO subscriptions (id, app_id, platform, token, language)
SELECT md5('t' || n)::uuid, '00000000-0000-4000-8000-00000000057d', 'ios', 'a2' || md5(n::text) || substr(md5('s' || n), 1, 30), 'en'
FROM generate_series(1, :n) n;
VACUUM ANALYZE;
-- Write out what sections 2 and 3 left dirty (a million deliveries and their indexes) now, not during the
-- first steps: in one run a checkpoint started by section 3 was still writing during the 2,000/s step, whose
-- deliveries then arrived in lumps seconds apart (the worker idle, waiting on the database).
CHECKPOINT;
SQL
# The worker with its defaults (as a new user runs it), except what the emulator on 127.0.0.1 needs.
PUSHIZO_CA_FILE=$work/tls/ca.pem PUSHIZO_ALLOW_PRIVATE_NETWORKS=true "$bindir/pushizo-worker" run 2>"$work/worker-steady.log" &
steady_worker=$!
pids+=($steady_worker)
sleep 1
steady_rows=()
sustained_rate=0
sustained_asked=0
for rate in $steady_rates; do
    step_started=$(date +%s.%N)
    worker_cpu_before=$(process_ticks "$steady_worker")
    pg_cpu_before=$(pg_ticks)
    "$pgbin/pgbench" -n -M prepared -c 4 -j 2 -R "$rate" -T "$steady_seconds" -D step="$rate" -D subscriptions="$steady_devices" \
        -f scripts/bench/steady-insert.pgbench "$PUSHIZO_DATABASE_URL" >"$work/pgbench-steady-$rate.log" 2>&1 || true
    sleep "$steady_grace"
    read -r inserted delivered achieved <<<"$(psql "$PUSHIZO_DATABASE_URL" -AtF' ' -c "
        SELECT count(*), (SELECT count(*) FROM delivery_events e JOIN notifications m ON m.id = e.notification_id
                          WHERE m.campaign_id = 'step-$rate' AND e.event = 'sent'),
               round(count(*) / greatest(extract(epoch FROM max(created_at) - min(created_at)), 0.001))
        FROM notifications WHERE campaign_id = 'step-$rate'")"
    worker_cpu=$(( $(process_ticks "$steady_worker") - worker_cpu_before ))
    pg_cpu=$(( $(pg_ticks) - pg_cpu_before ))
    # Per notification, over the step and its grace: the steady cost of the stream (PostgreSQL's includes the
    # producer's inserts).
    worker_us=$(ticks_us "$worker_cpu" "$inserted"); pg_us=$(ticks_us "$pg_cpu" "$inserted")
    # The first (lowest) step's, as its latency: the summary's steady figure.
    if [ -z "${steady_worker_us:-}" ]; then steady_worker_us=$worker_us; steady_pg_us=$pg_us; fi
    verdict=no
    if [ "$inserted" -gt 0 ] && [ "$delivered" = "$inserted" ]; then verdict=yes; if [ "$achieved" -gt "$sustained_rate" ]; then sustained_rate=$achieved; sustained_asked=$rate; fi; fi
    echo "    $rate/s asked, $achieved/s inserted for ${steady_seconds} s: $delivered of $inserted delivered ${steady_grace} s after the last insert (sustained: $verdict; CPU per notification: worker $(printf %.0f "$worker_us") µs, PostgreSQL $(printf %.0f "$pg_us") µs)"
    steady_rows+=("{\"rate\": $rate, \"inserted_per_second\": $achieved, \"inserted\": $inserted, \"delivered_within_grace\": $delivered, \"sustained\": $([ $verdict = yes ] && echo true || echo false), \"worker_cpu_us_per_notification\": $worker_us, \"postgres_cpu_us_per_notification\": $pg_us}")
    # Let a backlog drain before the next step (bounded), so each step starts from an empty queue.
    for _ in $(seq 1 120); do
        [ "$(psql "$PUSHIZO_DATABASE_URL" -Atc "SELECT count(*) FROM notifications WHERE status IN ('pending', 'expanding')") $(psql "$PUSHIZO_DATABASE_URL" -Atc "SELECT count(*) FROM deliveries")" = "0 0" ] && break
        sleep 0.5
    done
done
kill "$steady_worker" 2>/dev/null || true; wait "$steady_worker" 2>/dev/null || true
# The request log is complete once the emulator stops (it flushes on SIGTERM).
kill "$steady_emulator" 2>/dev/null || true; wait "$steady_emulator" 2>/dev/null || true
# Receipt time (the emulator's record) minus insert time (notifications.created_at) at the first (lowest) rate.
latency_rate=${steady_rates%% *}
psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -c "CREATE TABLE bench_received (line jsonb)" \
    -c "\\copy bench_received (line) FROM '$work/steady-requests.jsonl' WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')"
read -r latency_p50 latency_p99 latency_n <<<"$(psql "$PUSHIZO_DATABASE_URL" -AtF' ' -c "
    SELECT round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ms))::numeric, 1),
           round((percentile_cont(0.99) WITHIN GROUP (ORDER BY ms))::numeric, 1), count(*)
    FROM (SELECT extract(epoch FROM (r.line->>'at')::timestamptz - n.created_at) * 1000 AS ms
          FROM bench_received r
          JOIN delivery_events e ON e.event = 'sent' AND e.detail->>'apns_id' = r.line->>'apns_id'
          JOIN notifications n ON n.id = e.notification_id AND n.campaign_id = 'step-$latency_rate') l")"
echo "    insert -> provider receipt at $latency_rate/s: p50 ${latency_p50:-?} ms, p99 ${latency_p99:-?} ms ($latency_n requests; receipt times have ms resolution)"

# The same SQL alone: a burst of one-device notifications drained by the worker, then by pgbench running the
# bulk pass + claim + completion (scripts/bench/small-expand-claim-complete.pgbench).
burst_fill() {
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$burst" <<'SQL'
TRUNCATE delivery_events;
DELETE FROM notifications WHERE app_id = '00000000-0000-4000-8000-00000000057d';
INSERT INTO notifications (app_id, campaign_id, message, target)
SELECT '00000000-0000-4000-8000-00000000057d', 'burst', '{"headings": {"en": "Order update"}, "contents": {"en": "Your order shipped"}}',
       jsonb_build_object('include_subscription_ids', jsonb_build_array(md5('t' || (1 + i % 20000))::uuid))
FROM generate_series(1, :n) i;
VACUUM ANALYZE notifications;
SQL
}
"$bindir/pushizo-worker" emulator --emulator-listen 127.0.0.1:0 --emulator-tls-dir "$work/tls" \
    --emulator-apns-keys "BENCHTEAM1:BENCHKEY01:$work/key.p8" --emulator-ready-file "$work/emulator-burst.port" \
    --log-level warning 2>"$work/emulator-burst.log" &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/emulator-burst.port" ] && break; sleep 0.1; done
psql "$PUSHIZO_DATABASE_URL" -qc "UPDATE app_channels SET endpoint = 'https://localhost:$(cat "$work/emulator-burst.port")' WHERE app_id = '00000000-0000-4000-8000-00000000057d'"
burst_fill
started=$(date +%s.%N)
PUSHIZO_CA_FILE=$work/tls/ca.pem PUSHIZO_ALLOW_PRIVATE_NETWORKS=true PUSHIZO_POLL_INTERVAL=0.05 "$bindir/pushizo-worker" run --exit-when-drained 2>"$work/worker-burst.log"
finished=$(date +%s.%N)
burst_sent=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM delivery_events WHERE event = 'sent'")
burst_worker=$(calc "$burst_sent / ($finished - $started)")
burst_fill
started=$(date +%s.%N)
"$pgbin/pgbench" -n -M prepared -c 2 -j 2 -t $(( burst / 400 + 2 )) -f scripts/bench/small-expand-claim-complete.pgbench "$PUSHIZO_DATABASE_URL" >/dev/null 2>&1 || true
finished=$(date +%s.%N)
burst_pgbench_sent=$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT count(*) FROM delivery_events WHERE event = 'sent'")
burst_pgbench=$(calc "$burst_pgbench_sent / ($finished - $started)")
echo "    burst of $burst one-device notifications: worker $(printf %.0f "$burst_worker")/s ($burst_sent sent) vs pgbench $(printf %.0f "$burst_pgbench")/s ($burst_pgbench_sent)"

# Sections 6 to 8 bring their own PostgreSQL and emulators. Stop this section's now, so that none of its
# background work (autovacuum of the tables above, a checkpoint writing them out) lands in their figures.
for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
pids=()
scripts/pg-throwaway.sh stop "$work/pg" >/dev/null || true

echo "==> 6. worker CPU (user+sys) per sent delivery: ${PUSHIZO_BENCH_CPU_BROADCAST:-100000}-delivery broadcast, ${PUSHIZO_BENCH_CPU_SINGLES:-10000} one-device notifications"
# tee -a: when the bench's output goes to a file, opening /dev/stderr without O_APPEND would truncate it.
cpu_line=$(PUSHIZO_BENCH_CPU_PG_PORT=${PUSHIZO_BENCH_CPU_PG_PORT:-$((pg_port + 2))} scripts/bench/cpu-per-delivery.sh "$bindir" | tee -a /dev/stderr | tail -n 1)
cpu_broadcast_us=$(sed -n 's/.* broadcast=\([0-9.]*\).*/\1/p' <<<"$cpu_line")
cpu_one_device_us=$(sed -n 's/.* one_device=\([0-9.]*\).*/\1/p' <<<"$cpu_line")

echo "==> 7. queue depth and workers: ${PUSHIZO_BENCH_QUEUE_LARGE:-10000000}-delivery queue vs ${PUSHIZO_BENCH_QUEUE_SMALL:-100000}, workers ${PUSHIZO_BENCH_WORKER_COUNTS:-1 2 4}"
# A failure here leaves its figures unknown (null) rather than losing the whole table.
queue_line=$(PUSHIZO_BENCH_QUEUE_PG_PORT=${PUSHIZO_BENCH_QUEUE_PG_PORT:-$((pg_port + 3))} scripts/bench/queue-scale.sh "$bindir" | tee -a /dev/stderr | tail -n 1) || true
queue_field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$queue_line"; }
queue_small=$(queue_field small); queue_large=$(queue_field large); queued_large=$(queue_field queued_large)
queue_pgbench_small=$(queue_field pgbench_small); queue_pgbench_large=$(queue_field pgbench_large)
queue_small_before=$(queue_field small_before); queue_small_after=$(queue_field small_after)
ratio_or_null() { if [ -n "$1" ] && [ -n "$2" ] && [ "$2" != 0 ]; then calc "$1 / $2"; else echo null; fi; }
ratio_text() { if [ "$1" = null ]; then echo "?"; else printf %.2f "$1"; fi; }
queue_ratio=$(ratio_or_null "$queue_large" "$queue_small")
# Worker counts compare with the 1-worker run of the same series (the first small-queue drain).
queue_one=$(sed -n 's/.* workers .*\b1=\([0-9]*\).*/\1/p' <<<"$queue_line")
workers_json=() workers_text=()
for pair in $(sed -n 's/.* workers \(.*\)$/\1/p' <<<"$queue_line"); do
    count=${pair%=*} workers_rate=${pair#*=}
    workers_ratio=$(ratio_or_null "$workers_rate" "$queue_one")
    workers_json+=("{\"workers\": $count, \"per_second\": $workers_rate, \"ratio_to_one\": $workers_ratio}")
    workers_text+=("$count: $(ratio_text "$workers_ratio")x ($workers_rate/s)")
done

echo "==> 8. fairness: another app's one-device notifications (${PUSHIZO_BENCH_FAIR_RATE:-50}/s) while a ${PUSHIZO_BENCH_FAIR_SIZE:-1000000}-device broadcast drains"
fair_line=$(PUSHIZO_BENCH_FAIR_PG_PORT=${PUSHIZO_BENCH_FAIR_PG_PORT:-$((pg_port + 4))} scripts/bench/fairness.sh "$bindir" | tee -a /dev/stderr | tail -n 1) || true
fair_field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$fair_line"; }
fair_p50=$(fair_field p50); fair_p99=$(fair_field p99); fair_alone=$(fair_field alone); fair_beside=$(fair_field beside)
fair_ratio=$(ratio_or_null "$fair_beside" "$fair_alone")

load_at_end=$(cut -d' ' -f1-3 /proc/loadavg)
echo
echo "==> ratios against the targets"
printf "  %-55s %6.2fx   (target >= 0.80; median of $transport_rounds rounds)\n" "HTTP/2 transport as the worker hands it (submit) vs h2load" "$submit_ratio"
printf "  %-55s %6.2fx\n" "HTTP/2 transport, one send per request, vs h2load" "$one_ratio"
printf "  %-55s %6.2fx   (target >= 0.50)\n" "end to end (worker jobs/s vs pgbench claim/complete)" "$(calc "$worker_jps / $pgbench_jps")"
printf "  %-55s %6.2fx   (no target; CPU a delivery: the worker's job %.0f µs, pgbench's %.0f µs)\n" "end to end CPU cost ratio (pgbench's job / the worker's)" \
    "$(calc "$e2e_pgbench_cpu_us / $e2e_worker_cpu_us")" "$e2e_worker_cpu_us" "$e2e_pgbench_cpu_us"
printf "  %-55s %6.2fx   (target <= 2.50: %s; %.1f µs a broadcast delivery, the floor %.1f µs, claim/complete alone %.1f µs)\n" \
    "database CPU per delivery vs the floor (its event alone)" "$floor_ratio" "$floor_verdict" "$worker_pg_mean_us" "$floor_mean_us" \
    "$(mean "${pgbench_pg_us[@]}")"
if [ "$own_core_ratio" != null ]; then
    printf "  %-55s %6.2fx   (no target; %.0f vs %.0f/s; PostgreSQL's core %s %% busy in the worker's runs)\n" "end to end, PostgreSQL on a core of its own" \
        "$own_core_ratio" "$own_core_worker_jps" "$own_core_pgbench_jps" "$own_core_busy"
fi
printf "  %-55s %6s MB   (target < 150)\n" "worker peak RSS" "${peak_rss:-?}"
printf "  %-55s %6s s    (target < 10)\n" "expansion of $expansion_size subscriptions" "${expansion_seconds:-?}"
printf "  %-55s %6s /s   (target >= 5000; what pgbench inserted at the %s/s step, every one delivered)\n" "one-device notifications sustained (highest rate)" "$sustained_rate" "$sustained_asked"
printf "  %-55s %6.2fx   (one-device burst, same SQL alone)\n" "transactional path vs pgbench bulk pass+claim/complete" "$(calc "$burst_worker / $burst_pgbench")"
printf "  %-55s %6s ms   (target < 50; p50 %s ms)\n" "insert -> provider receipt p99 at $latency_rate/s" "${latency_p99:-?}" "${latency_p50:-?}"
printf "  %-55s %6s µs   (target <= 20; one-device notifications %s µs)\n" "worker CPU per sent delivery (user+sys, broadcast)" "${cpu_broadcast_us:-?}" "${cpu_one_device_us:-?}"
printf "  %-55s %6.0f µs   (PostgreSQL %.0f µs, the producer's inserts included)\n" "worker CPU per notification, steady $latency_rate/s" "$steady_worker_us" "$steady_pg_us"
printf "  %-55s %6sx   (target >= 0.80; %s vs %s/s, small before/after %s/%s; SQL alone %sx)\n" \
    "deep queue: ${queued_large:-?} deliveries vs ${PUSHIZO_BENCH_QUEUE_SMALL:-100000}" "$(ratio_text "$queue_ratio")" "${queue_large:-?}" \
    "${queue_small:-?}" "${queue_small_before:-?}" "${queue_small_after:-?}" "$(ratio_text "$(ratio_or_null "$queue_pgbench_large" "$queue_pgbench_small")")"
printf "  %-55s %s\n" "workers on one database, rate vs 1 worker" "$(IFS=,; echo "${workers_text[*]:-?}" | sed 's/,/, /g')"
printf "  %-55s %6s ms   (target < 100; p50 %s ms)\n" "another app's one-device p99 beside a broadcast" "${fair_p99:-?}" "${fair_p50:-?}"
printf "  %-55s %6sx   (target >= 0.90; %s/s beside them, %s/s alone)\n" "the broadcast's rate beside them vs alone" "$(ratio_text "$fair_ratio")" "${fair_beside:-?}" "${fair_alone:-?}"
printf "  (load average while measuring: %s)\n" "$load_at_end"

json=$root/var/bench-$(date -u +%Y%m%dT%H%M%SZ).json
steady_json=$(IFS=,; echo "${steady_rows[*]}")
cat >"$json" <<JSON
{"at": "$(date -u +%FT%TZ)", "load_average": "$load_at_end", "nproc": $(nproc),
 "transport": {"h2load_rps": ${h2load_rps:-null}, "pushizo_rps": ${ours_rps:-null}, "ratio": $one_ratio,
   "rounds": {"h2load_rps": [$(IFS=,; echo "${h2load_runs[*]}")], "submit25_rps": [$(IFS=,; echo "${submit_runs[*]}")], "one_send_rps": [$(IFS=,; echo "${one_runs[*]}")]}},
 "transport_submit25": {"pushizo_rps": ${submit_rps:-null}, "ratio": $submit_ratio},
 "end_to_end": {"deliveries": $deliveries, "worker_jobs_per_second": $worker_jps, "pgbench_jobs_per_second": $pgbench_jps, "ratio": $(calc "$worker_jps / $pgbench_jps"), "worker_peak_rss_mb": ${peak_rss:-null}, "worker_runs": [$(IFS=,; echo "${worker_runs[*]}")], "pgbench_runs": [$(IFS=,; echo "${pgbench_runs[*]}")],
   "cpu_us_per_delivery": {"worker_job": $e2e_worker_cpu_us, "postgres_for_worker": $(mean "${worker_pg_us[@]}"), "worker": $(mean "${worker_own_us[@]}"), "apns_stand_in": $(mean "${emulator_us[@]}"),
     "pgbench_job": $e2e_pgbench_cpu_us, "postgres_for_pgbench": $(mean "${pgbench_pg_us[@]}"), "pgbench": $(mean "${pgbench_own_us[@]}"), "ratio": $(calc "$e2e_pgbench_cpu_us / $e2e_worker_cpu_us")},
   "event_floor": {"postgres_us_per_event": $floor_mean_us, "runs_us": [$(IFS=,; echo "${floor_us[*]}")], "batch_rows": [$(IFS=,; echo "${floor_batches[*]}")],
     "postgres_us_per_delivery": $worker_pg_mean_us, "ratio": $floor_ratio, "target": 2.5},
   "statements_run": {"postgres_us_per_delivery": $statements_pg_us, "table": "var/bench/statements.txt"},
   "postgres_own_core": {"pairs": $own_core_pairs, "worker_jobs_per_second": $own_core_worker_jps, "pgbench_jobs_per_second": $own_core_pgbench_jps, "ratio": $own_core_ratio, "postgres_core_busy_percent": [$(IFS=,; echo "${own_busy[*]}")]}},
 "expansion": {"subscriptions": $expansion_size, "seconds": ${expansion_seconds:-null}},
 "transactional": {"seconds_per_step": $steady_seconds, "grace_seconds": $steady_grace, "steps": [$steady_json],
   "sustained_per_second": $sustained_rate,
   "worker_cpu_us_per_notification_at_latency_rate": ${steady_worker_us:-null}, "postgres_cpu_us_per_notification_at_latency_rate": ${steady_pg_us:-null},
   "latency_rate": $latency_rate, "latency_p50_ms": ${latency_p50:-null}, "latency_p99_ms": ${latency_p99:-null}, "latency_samples": ${latency_n:-0},
   "burst": {"notifications": $burst, "worker_per_second": $burst_worker, "pgbench_per_second": $burst_pgbench, "ratio": $(calc "$burst_worker / $burst_pgbench")}},
 "cpu_per_delivery": {"broadcast_deliveries": ${PUSHIZO_BENCH_CPU_BROADCAST:-100000}, "broadcast_us": ${cpu_broadcast_us:-null},
   "one_device_notifications": ${PUSHIZO_BENCH_CPU_SINGLES:-10000}, "one_device_us": ${cpu_one_device_us:-null}},
 "queue_depth": {"deliveries_measured": ${PUSHIZO_BENCH_QUEUE_SMALL:-100000}, "small_queue": ${PUSHIZO_BENCH_QUEUE_SMALL:-100000}, "large_queue": ${queued_large:-null},
   "small_per_second": ${queue_small:-null}, "small_before_per_second": ${queue_small_before:-null}, "small_after_per_second": ${queue_small_after:-null},
   "large_per_second": ${queue_large:-null}, "ratio": $queue_ratio,
   "pgbench_small_per_second": ${queue_pgbench_small:-null}, "pgbench_large_per_second": ${queue_pgbench_large:-null},
   "pgbench_ratio": $(ratio_or_null "$queue_pgbench_large" "$queue_pgbench_small")},
 "workers": {"deliveries": ${PUSHIZO_BENCH_QUEUE_SMALL:-100000}, "runs": [$(IFS=,; echo "${workers_json[*]}")]},
 "fairness": {"broadcast_devices": ${PUSHIZO_BENCH_FAIR_SIZE:-1000000}, "other_app_per_second": ${PUSHIZO_BENCH_FAIR_RATE:-50},
   "other_app_p50_ms": ${fair_p50:-null}, "other_app_p99_ms": ${fair_p99:-null},
   "broadcast_alone_per_second": ${fair_alone:-null}, "broadcast_beside_per_second": ${fair_beside:-null}, "ratio": $fair_ratio}}
JSON
cp "$json" "$work/results.json"
echo "  JSON: ${json#$root/}"
