-- Time each request waited for the engine before its first step (fair scheduling), per
-- history bucket as a latency histogram merged by addition like ttft and itl. Buckets
-- written before it read as empty.
ALTER TABLE history ADD COLUMN queue bigint[] NOT NULL DEFAULT '{}';
