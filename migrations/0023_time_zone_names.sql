-- The tz database's zone names, kept in a table for local-time expansion to look names up by key.
--
-- pushizo_known_zones (0011) answered from pg_timezone_names, which opens and parses every zone file of the tz
-- database on each call: about 30 ms on the bench machine when idle. Every expansion statement with a
-- local-time notification calls it once, so a 1,000,000-subscriber local-time broadcast (200 chunks) spent 6 s
-- reading zone files, and a steady stream of local-time notifications paid it on every bulk pass (at 30 passes
-- a second, most of a core of the database server).
--
-- time_zone_names holds the names pg_timezone_names lists (at most 64 bytes, as before). The worker refreshes it
-- when it starts and every hour after (pushizo_refresh_time_zone_names), so a tz database update that adds or
-- removes a zone is seen within the hour; until then a new zone's subscribers fall back to the app's zone, as an
-- unknown name always does. While the table is empty (a refresh that never ran) the names are read from
-- pg_timezone_names as before, so an empty table never makes every zone unknown.
CREATE TABLE time_zone_names (
    name text PRIMARY KEY
);

-- Makes time_zone_names what pg_timezone_names lists now. Rows change only where the tz database did, so an
-- hourly call leaves no dead rows behind. One caller at a time (an advisory lock nobody waits for: "PUSHTZNS"
-- in ASCII). Returns how many names were added or removed.
CREATE FUNCTION pushizo_refresh_time_zone_names() RETURNS integer
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    listed  text[];
    removed integer;
    added   integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(x'50555348545A4E53'::bigint) THEN
        RETURN 0;
    END IF;
    SELECT coalesce(array_agg(z.name), '{}') INTO listed FROM pg_timezone_names z WHERE octet_length(z.name) <= 64;
    DELETE FROM time_zone_names t WHERE NOT (t.name = ANY (listed));
    GET DIAGNOSTICS removed = ROW_COUNT;
    INSERT INTO time_zone_names (name) SELECT unnest(listed) ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS added = ROW_COUNT;
    RETURN removed + added;
END;
$$;

SELECT pushizo_refresh_time_zone_names();

-- The names among p_names that the tz database knows, spelled exactly as given (no case folding, no
-- abbreviations or POSIX specs such as 'UTC+5'), as quiet hours accept names exactly as stored: now lookups by
-- key in time_zone_names, pg_timezone_names only while that table is empty.
CREATE OR REPLACE FUNCTION pushizo_known_zones(p_names text[]) RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM time_zone_names)
                THEN (SELECT coalesce(array_agg(t.name), '{}') FROM time_zone_names t WHERE t.name = ANY (p_names))
                ELSE (SELECT coalesce(array_agg(z.name), '{}') FROM pg_timezone_names z
                      WHERE z.name = ANY (p_names) AND octet_length(z.name) <= 64)
           END
$$;
