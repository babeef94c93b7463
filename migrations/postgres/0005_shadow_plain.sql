-- Plain decoding as the route's shadow checks measured it (tokens after the first, and the
-- engine seconds they took), per history bucket, merged by addition: what the analyst's
-- speed-up compares the route's decoding with. Buckets written before it read as none.
ALTER TABLE history
    ADD COLUMN shadow_plain_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN shadow_plain_secs double precision NOT NULL DEFAULT 0;
