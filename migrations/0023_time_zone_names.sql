-- The tz database's zone names, kept in a table for local-time expansion to look names up by key.
--
-- pushizo_known_zones (0011) answered from pg_timezone_names, which opens and parses every zone file of the tz
-- database on each call: about 30 ms on the bench machine when idle. Every expansion statement with a
-- local-time notification calls it once, so a 1,000,000-subscriber local-time broadcast (200 chunks) spent 6 s
-- reading zone files, and a steady stream of local-time notifications paid it on every bulk pass (at 30 passes
-- a second, most of a core of the database server).
--
-- time_zone_names holds the names pg_timezone_names lists (at most 64 bytes, as before). The worker refreshes it
-- soon after it starts and every hour after (pushizo_refresh_time_zone_names), so a tz database update that adds
-- a zone is seen within the hour; until then the new zone's subscribers fall back to the app's zone, as an
-- unknown name always does. A name the table holds but this server's tz database cannot load (removed by an
-- update, or a replica or restored copy on a host with older zone files) is not known either: each name found is
-- also loaded, so such a subscriber falls back too instead of failing the statement. While the table is empty (a
-- refresh that never ran) the names are read from pg_timezone_names as before.
--
-- Both functions run as their owner (SECURITY DEFINER): a worker role given rights table by table, not through the
-- default privileges of docs/systemd.md, has none on this new table, and every expansion with a local time would
-- otherwise fail on it.
CREATE TABLE time_zone_names (
    name text PRIMARY KEY
);

-- The two functions below run as their owner and are created with the schema written into their bodies and
-- search_path = pg_catalog, pg_temp: with the schema in the search path, an operator or function of the same name
-- made there with exact argument types (`||` for text[] and text, say) would be chosen over PostgreSQL's
-- polymorphic built-in, and run with the owner's rights.
DO $do$
BEGIN
    -- Makes time_zone_names what pg_timezone_names lists now. Rows change only where the tz database did, so an
    -- hourly call leaves no dead rows behind. One caller at a time (an advisory lock nobody waits for:
    -- "PUSHTZNS" in ASCII). Returns how many names were added or removed.
    EXECUTE format($fn$
        CREATE FUNCTION pushizo_refresh_time_zone_names() RETURNS integer
            LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
        DECLARE
            listed  text[];
            removed integer;
            added   integer;
        BEGIN
            IF NOT pg_try_advisory_xact_lock(x'50555348545A4E53'::bigint) THEN
                RETURN 0;
            END IF;
            SELECT coalesce(array_agg(z.name), '{}') INTO listed FROM pg_timezone_names z WHERE octet_length(z.name) <= 64;
            DELETE FROM %1$I.time_zone_names t WHERE NOT (t.name = ANY (listed));
            GET DIAGNOSTICS removed = ROW_COUNT;
            INSERT INTO %1$I.time_zone_names (name) SELECT unnest(listed) ON CONFLICT DO NOTHING;
            GET DIAGNOSTICS added = ROW_COUNT;
            RETURN removed + added;
        END;
        $body$
        $fn$, current_schema());

    -- The names among p_names that the tz database knows, spelled exactly as given (no case folding, no
    -- abbreviations or POSIX specs such as 'UTC+5'), as quiet hours accept names exactly as stored: now lookups
    -- by key in time_zone_names, each name found then loaded once (PostgreSQL keeps a loaded zone for the
    -- session), and pg_timezone_names only while the table is empty.
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION pushizo_known_zones(p_names text[]) RETURNS text[]
            LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
        DECLARE
            listed text[];
            known  text[] := '{}';
            zone   text;
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM %1$I.time_zone_names) THEN
                RETURN (SELECT coalesce(array_agg(z.name), '{}') FROM pg_timezone_names z
                        WHERE z.name = ANY (p_names) AND octet_length(z.name) <= 64);
            END IF;
            SELECT coalesce(array_agg(t.name), '{}') INTO listed FROM %1$I.time_zone_names t WHERE t.name = ANY (p_names);
            FOREACH zone IN ARRAY listed LOOP
                BEGIN
                    PERFORM now() AT TIME ZONE zone;
                    known := array_append(known, zone);
                EXCEPTION WHEN invalid_parameter_value THEN
                    -- In the table, not in this server's zone files: unknown, as if the table had been refreshed.
                    NULL;
                END;
            END LOOP;
            RETURN known;
        END;
        $body$
        $fn$, current_schema());
END;
$do$;

SELECT pushizo_refresh_time_zone_names();
