-- Tag numbers that can never fail a statement (docs/targets.md, "Tag numbers"). A producer's tag is compared
-- as a number only when it is a sane finite number in range; anything else is "not a number" (NULL), which
-- simply does not match `>` / `<`. Never an error: one user's tag must not stop the expansion of everyone.
--
-- A string reads as a number when it is at most 100 bytes of the decimal grammar below (surrounding ASCII
-- blanks allowed) with an exponent of at most three digits, so the cast to numeric always succeeds (weight and
-- scale stay near 1,100 digits, far inside numeric's limits). "NaN", "Infinity", "1e999999", "1e-999999",
-- hex, Unicode digits and spaces are not numbers. `\s` is not used: in a UTF-8 database it also matches
-- Unicode spaces that numeric's input refuses.
-- Then, string or JSON number alike, its magnitude must be at most 1.7976931348623157e308 (an IEEE 754
-- double's largest finite value: what JSON producers in any language can write, and the range of filter
-- values); a 400-digit number is out of range. Both functions are inlined by the planner (plain SQL, no
-- STRICT, no FROM).
CREATE OR REPLACE FUNCTION pushizo_numeric_or_null(p text) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN octet_length(p) <= 100
                 AND p ~ '^[ \t\r\n]*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]{1,3})?[ \t\r\n]*$'
           -- Nested, not AND-ed: the cast must only ever run on text the grammar accepted.
           THEN CASE WHEN abs(p::numeric) <= 1.7976931348623157e308 THEN p::numeric END END
    $$;

-- A tag value (`users.tags -> key`) as a number, or NULL: a JSON number in range, or a string that
-- pushizo_numeric_or_null reads; booleans, objects, arrays, null and a missing key are not numbers.
CREATE FUNCTION pushizo_tag_number(p jsonb) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE jsonb_typeof(p)
           WHEN 'number' THEN CASE WHEN abs(p::numeric) <= 1.7976931348623157e308 THEN p::numeric END
           WHEN 'string' THEN pushizo_numeric_or_null(p #>> '{}')
           END
    $$;
