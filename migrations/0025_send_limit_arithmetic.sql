-- A send limit of any positive finite value (the CHECK of apps.max_sends_per_second) is computed without
-- leaving float8's range.
--
-- pushizo_bucket_permits multiplied the rate by the seconds since the bucket's last refill in float8 and capped
-- the sum at the burst afterwards. PostgreSQL raises an error for a float8 result out of range ("value out of
-- range: overflow"), so a rate of 1.7e308 failed at once and 1e305 after an idle hour: every claim of every
-- worker failed while such an app existed, queued deliveries or not, and `status` with it. A rate below about
-- 1e-307 failed the other way: float8 multiplication refuses a zero result from non-zero operands ("underflow"),
-- in pushizo_send_burst (the rate times 0.1) and in the refill.
--
-- Both now compute in numeric, whose range holds any product of float8 values, cap at the burst (at most a tenth
-- of the largest float8) and round to 300 decimals before returning to float8: numeric's cast refuses a value
-- that would round to zero in float8 too ("out of range"), such as the permits a 5e-324/s bucket holds a moment
-- after its last one was taken. The results are those of before for every rate that worked, to float8's
-- precision. They stay plain SQL functions without a SET clause or FROM, so the claim still inlines them.
CREATE OR REPLACE FUNCTION pushizo_send_burst(p_rate double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT greatest(1.0, p_rate::numeric * 0.1)::float8 $$;

CREATE OR REPLACE FUNCTION pushizo_bucket_permits(
    p_rate double precision, p_tokens double precision, p_refilled_at timestamptz, p_at timestamptz
) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT round(least(pushizo_send_burst(p_rate)::numeric,
                       p_tokens::numeric + p_rate::numeric * greatest(0, extract(epoch FROM p_at - p_refilled_at)::numeric)),
                 300)::float8
$$;
