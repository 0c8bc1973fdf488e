# Sourced by the bench scripts: a throwaway PostgreSQL with the migrations applied, APNs emulators (TLS) that
# accept the bench's team key, and an app whose APNs channel points at one. Needs $root, $bindir and $work.

# Starts PostgreSQL in $work/pg on port $1, exports PUSHIZO_DATABASE_URL, applies the migrations (of the
# directory $2, default the repository's) and writes an APNs signing key (P-256) to $work/key.p8.
bench_database() {
    PUSHIZO_DATABASE_URL=$("$root/scripts/pg-throwaway.sh" start "$work/pg" "$1")
    export PUSHIZO_DATABASE_URL
    "$bindir/pushizo-worker" migrate --migrations-dir "${2:-$root/migrations}" 2>/dev/null
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.p8" 2>/dev/null
}

# Starts an emulator named $1 in the background (its pid in $emulator_pid, its log $work/$1.log) and waits
# until it has written its port to $work/$1.port. Further arguments go to the emulator.
bench_emulator() {
    local name=$1
    shift
    "$bindir/pushizo-worker" emulator --emulator-listen 127.0.0.1:0 --emulator-tls-dir "$work/tls" \
        --emulator-apns-keys "BENCHTEAM1:BENCHKEY01:$work/key.p8" --emulator-ready-file "$work/$name.port" \
        --log-level warning "$@" 2>"$work/$name.log" &
    emulator_pid=$!
    for _ in $(seq 1 100); do [ -s "$work/$name.port" ] && break; sleep 0.1; done
}

# Creates the app $1 (default language en) with an APNs channel (token auth, the key above) whose endpoint is
# the emulator named $2.
bench_apns_app() {
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v app="$1" -v key="$(cat "$work/key.p8")" \
        -v endpoint="https://localhost:$(cat "$work/$2.port")" <<'SQL'
INSERT INTO apps (id, default_language) VALUES (:'app', 'en');
INSERT INTO app_channels (app_id, provider, settings, endpoint)
VALUES (:'app', 'apns',
        jsonb_build_object('team_id', 'BENCHTEAM1', 'key_id', 'BENCHKEY01', 'private_key', :'key', 'topic', 'dev.pushizo.bench'),
        :'endpoint');
SQL
}

# CPU ticks (user + sys, 1/CLK_TCK s each) of process $1.
process_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# CPU ticks of the whole PostgreSQL server in $work/pg: the postmaster, its live children and the children it
# has reaped (ended backends).
pg_ticks() {
    local postmaster total child
    postmaster=$(head -n 1 "$work/pg/data/postmaster.pid")
    total=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$postmaster/stat")
    for child in $(pgrep -P "$postmaster"); do
        total=$((total + $(process_ticks "$child" 2>/dev/null || echo 0)))
    done
    echo "$total"
}

# pg_stat_statements and pg_stat_kcache (each statement's CPU time, from getrusage around it) on the server in
# $work/pg (port $1): the libraries loaded (a restart), the extensions created, counting nothing until
# bench_statements_reset.
bench_statements_enable() {
    psql "$PUSHIZO_DATABASE_URL" -q -c "ALTER SYSTEM SET shared_preload_libraries = pg_stat_statements, pg_stat_kcache"
    "$root/scripts/pg-throwaway.sh" stop "$work/pg" >/dev/null
    "$root/scripts/pg-throwaway.sh" start "$work/pg" "$1" >/dev/null
    # Their settings are known to the server only once the libraries are loaded.
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" \
        -c "CREATE EXTENSION IF NOT EXISTS pg_stat_kcache" -c "ALTER SYSTEM SET pg_stat_statements.track_planning = on" \
        -c "ALTER SYSTEM SET pg_stat_kcache.track_planning = on"
    bench_statements_track none
}

# Sets what both extensions count to $1 (none, top or all) and waits until a new session has it (the postmaster
# reloads its configuration after pg_reload_conf returns; sessions take the postmaster's at their start).
bench_statements_track() {
    psql "$PUSHIZO_DATABASE_URL" -q -c "ALTER SYSTEM SET pg_stat_statements.track = '$1'" \
        -c "ALTER SYSTEM SET pg_stat_kcache.track = '$1'" -c "SELECT pg_reload_conf()" >/dev/null
    for _ in $(seq 1 100); do
        [ "$(psql "$PUSHIZO_DATABASE_URL" -Atqc "SELECT current_setting('pg_stat_statements.track') || current_setting('pg_stat_kcache.track')")" = "$1$1" ] && return 0
        sleep 0.05
    done
}

# Every statement from now on counted afresh, nested ones (triggers', functions') included.
bench_statements_reset() {
    bench_statements_track all
    psql "$PUSHIZO_DATABASE_URL" -q -c "SELECT pg_stat_statements_reset(), pg_stat_kcache_reset()" >/dev/null
}

# Keeps what was counted since the reset for this database in the table $1 (pg_stat_statements' columns and
# cpu_seconds, execution and planning, user and system), then stops counting.
bench_statements_snapshot() {
    psql "$PUSHIZO_DATABASE_URL" -q -c "SET client_min_messages = warning" -c "DROP TABLE IF EXISTS $1" -c "CREATE TABLE $1 AS
        SELECT s.*, k.exec_user_time + k.exec_system_time + k.plan_user_time + k.plan_system_time AS cpu_seconds
        FROM pg_stat_statements s
        LEFT JOIN pg_stat_kcache() k ON k.queryid = s.queryid AND k.userid = s.userid AND k.dbid = s.dbid AND k.top = s.toplevel
        WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    bench_statements_track none
}

# The $3 statements of the snapshot $1 with the most CPU time, $2 being the deliveries of its run: calls, rows,
# CPU time per call, per row (of the statement's own rows) and per delivery, the share of the top-level
# statements' CPU time (a nested statement's time is inside its caller's too), wall time per row, shared buffers
# hit, read and dirtied per row, and the text's first 70 characters with whitespace collapsed. Execution and
# planning together. Then the top-level statements' sums.
bench_statements_table() {
    psql "$PUSHIZO_DATABASE_URL" -q -P footer=off -v deliveries="$2" -v top="$3" <<SQL
WITH s AS (SELECT *, cpu_seconds * 1e6 AS cpu_us, (total_exec_time + total_plan_time) * 1000 AS wall_us FROM $1),
all_top AS (SELECT sum(cpu_us) AS top_us FROM s WHERE toplevel)
SELECT calls, rows, CASE WHEN toplevel THEN 'top' ELSE 'nested' END AS level,
       round((cpu_us / nullif(calls, 0))::numeric, 1) AS "cpu µs/call",
       round((cpu_us / nullif(rows, 0))::numeric, 2) AS "cpu µs/row",
       round((cpu_us / :deliveries)::numeric, 2) AS "cpu µs/delivery",
       round((100 * cpu_us / top_us)::numeric, 1) AS "% cpu",
       round((wall_us / nullif(rows, 0))::numeric, 2) AS "wall µs/row",
       round(shared_blks_hit::numeric / nullif(rows, 0), 2) AS "hit/row",
       round(shared_blks_read::numeric / nullif(rows, 0), 2) AS "read/row",
       round(shared_blks_dirtied::numeric / nullif(rows, 0), 2) AS "dirtied/row",
       left(regexp_replace(query, '\s+', ' ', 'g'), 70) AS statement
FROM s, all_top ORDER BY cpu_us DESC NULLS LAST, wall_us DESC LIMIT :top;
SELECT 'top-level statements: ' || sum(calls) || ' calls, CPU ' || round(sum(cpu_seconds)::numeric * 1000) || ' ms: '
       || round((sum(cpu_seconds) * 1e6 / :deliveries)::numeric, 1) || ' µs a delivery (wall time '
       || round((sum(total_exec_time + total_plan_time) * 1000 / :deliveries)::numeric, 1) || ', planning '
       || round((sum(total_plan_time) * 1000 / :deliveries)::numeric, 1) || '); shared buffers a delivery: '
       || round(sum(shared_blks_hit)::numeric / :deliveries, 1) || ' hit, '
       || round(sum(shared_blks_read)::numeric / :deliveries, 2) || ' read, '
       || round(sum(shared_blks_dirtied)::numeric / :deliveries, 2) || ' dirtied'
FROM $1 WHERE toplevel \g (format=unaligned tuples_only)
SQL
}
