-- Prompt tokens whose KV came from the prefix cache, per history bucket (merged by addition
-- like every other count). Buckets written before the cache read 0.
ALTER TABLE history ADD COLUMN cached_tokens bigint NOT NULL DEFAULT 0;
