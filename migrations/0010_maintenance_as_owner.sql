-- The data-lifecycle maintenance, runnable by a worker role that does not own the schema.
--
-- Workers may connect as a role with data rights only while a schema-owning role runs the migrations
-- (docs/systemd.md, "The schema-owning role"). Creating and dropping a partition of delivery_events needs the
-- owner's rights, so both go through functions that run as their owner (SECURITY DEFINER) and do exactly one
-- thing each: create one UTC day's partition, or drop one day partition whose whole range is older than the
-- retention. Neither takes a name or an identifier it would trust: the drop only acts on a partition the
-- catalog lists under delivery_events. search_path is pinned to the schema the migrations run in (then pg_temp,
-- last) so that a caller's objects cannot stand in for the ones these functions name, and new partitions land
-- beside their parent (PostgreSQL docs, "Writing SECURITY DEFINER Functions Safely"; pg_catalog is searched
-- first implicitly).

-- Drops the day partition named p_name when it is a partition of delivery_events (not the DEFAULT one) whose
-- upper bound is at or before now() - p_retention_seconds. The retention is at least one day whatever the
-- caller asks (the worker's own setting has the same floor), so no caller can drop today's or yesterday's events.
-- Returns true when it dropped the partition, false when it was not (or no longer) one to drop.
CREATE FUNCTION pushizo_drop_event_partition(p_name text, p_retention_seconds float8) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pushizo_event_partitions() p
                   WHERE p.name = p_name AND NOT p.is_default AND p.upper_bound IS NOT NULL
                     AND p.upper_bound <= now() - make_interval(secs => greatest(p_retention_seconds, 86400))) THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE %I', p_name);
    RETURN true;
END;
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION pushizo_create_event_partition(date) SECURITY DEFINER SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION pushizo_drop_event_partition(text, float8) SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION pushizo_event_partitions() SET search_path = %I, pg_temp', current_schema());
END;
$$;

-- Not for every role that can connect: a role that may not delete events must not drop them either. The worker
-- role keeps EXECUTE through the default privileges docs/systemd.md sets up (explicit grants survive this
-- revoke); the schema owner always has it. Elsewhere: GRANT EXECUTE ON FUNCTION ... TO <worker role>.
REVOKE EXECUTE ON FUNCTION pushizo_create_event_partition(date) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_drop_event_partition(text, float8) FROM PUBLIC;
