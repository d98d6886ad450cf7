-- A tenant's client output buffer limits (OutputBufferLimit: hard_bytes, soft_bytes, soft_seconds), each in place
-- of the gateway's flag of the same name: one for its connections, one for them while they are subscribed.
-- NULL: the gateway's flag applies.
--
-- One jsonb column per limit, not three bigint columns beside max_connections: a limit is one value, given or
-- absent as a whole (three nullable columns would need an all-or-none rule of their own, and would add six
-- columns to every tenant query), always read and written whole, never searched or compared in SQL. The CHECK
-- holds the document to exactly what the API accepts, so every stored value decodes: an object of these three
-- keys and no other, integers within bigint (soft_seconds within the API's u32), a soft bound with a duration,
-- and a hard bound not below the soft one. 0 turns a bound off.

-- Whether `value` is a JSON integer from 0 to `max` (false for anything else, NULL included, so that a CHECK
-- cannot pass on a missing key).
CREATE FUNCTION jsonb_integer_up_to(value jsonb, max numeric) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN jsonb_typeof(value) = 'number' THEN scale(value::numeric) = 0 AND value::numeric BETWEEN 0 AND max
        ELSE false
    END
$$;

CREATE FUNCTION output_buffer_limit_valid(value jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN jsonb_typeof(value) IS DISTINCT FROM 'object'
            OR value - ARRAY['hard_bytes', 'soft_bytes', 'soft_seconds'] <> '{}'::jsonb THEN false
        WHEN NOT (jsonb_integer_up_to(value -> 'hard_bytes', 9223372036854775807)
                  AND jsonb_integer_up_to(value -> 'soft_bytes', 9223372036854775807)
                  AND jsonb_integer_up_to(value -> 'soft_seconds', 4294967295)) THEN false
        -- The casts below are safe: CASE tries the branches in order.
        ELSE ((value ->> 'soft_bytes')::bigint = 0 OR (value ->> 'soft_seconds')::bigint > 0)
            AND ((value ->> 'hard_bytes')::bigint = 0 OR (value ->> 'soft_bytes')::bigint = 0
                 OR (value ->> 'hard_bytes')::bigint >= (value ->> 'soft_bytes')::bigint)
    END
$$;

ALTER TABLE tenants
    ADD COLUMN output_buffer_limit jsonb
        CONSTRAINT tenants_output_buffer_limit_valid
        CHECK (output_buffer_limit IS NULL OR output_buffer_limit_valid(output_buffer_limit)),
    ADD COLUMN pubsub_output_buffer_limit jsonb
        CONSTRAINT tenants_pubsub_output_buffer_limit_valid
        CHECK (pubsub_output_buffer_limit IS NULL OR output_buffer_limit_valid(pubsub_output_buffer_limit));
