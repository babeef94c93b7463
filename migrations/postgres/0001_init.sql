-- specgate's PostgreSQL schema, version 1: tenants and hashed keys, policies with every
-- version, per-route history buckets with additive merges, and the ids of applied flushes.
-- Applied in one transaction together with its row in specgate_schema.

CREATE TABLE tenants (
    name    text PRIMARY KEY,
    created bigint NOT NULL,
    -- LimitOverrides as JSON: {"max_concurrent_requests"?, "tokens_per_minute"?}
    limits  jsonb NOT NULL DEFAULT '{}'
);

CREATE TABLE api_keys (
    id      text PRIMARY KEY,
    tenant  text NOT NULL REFERENCES tenants (name),
    -- SHA-256 of the secret, hex; the secret itself is never stored.
    sha256  text NOT NULL,
    created bigint NOT NULL,
    revoked bigint
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant);

-- The current policy of a route (tenant or '*', class).
CREATE TABLE policies (
    tenant     text NOT NULL,
    class      text NOT NULL,
    version    integer NOT NULL,
    policy     jsonb NOT NULL,
    updated_by text NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (tenant, class)
);

-- Every change of a route, numbered 1, 2, ... per route.
CREATE TABLE policy_history (
    tenant  text NOT NULL,
    class   text NOT NULL,
    version integer NOT NULL,
    action  text NOT NULL,
    policy  jsonb,
    by_whom text NOT NULL,
    at      bigint NOT NULL,
    PRIMARY KEY (tenant, class, version)
);

-- Element-wise sum of two counter arrays of any lengths (the shorter padded with zeros):
-- how per-position acceptance counts and latency histograms merge.
CREATE FUNCTION specgate_add_counts(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i), '{}')
    FROM unnest(coalesce(a, '{}'), coalesce(b, '{}')) WITH ORDINALITY AS t (x, y, i)
$$;

CREATE AGGREGATE specgate_sum_counts(bigint[]) (
    SFUNC = specgate_add_counts,
    STYPE = bigint[],
    INITCOND = '{}'
);

-- One bucket of a route's history per strategy, k and minute ('m') or hour ('h').
-- Every measure merges by addition, so replicas add to the same bucket.
CREATE TABLE history (
    tenant            text NOT NULL,
    class             text NOT NULL,
    strategy          text NOT NULL,
    k                 smallint NOT NULL,
    granularity       "char" NOT NULL,
    start             bigint NOT NULL,
    requests          bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    tokens_out        bigint NOT NULL,
    target_passes     bigint NOT NULL,
    rounds            bigint NOT NULL,
    drafted           bigint NOT NULL,
    accepted          bigint NOT NULL,
    judged            bigint NOT NULL,
    shadow_checks     bigint NOT NULL,
    shadow_mismatches bigint NOT NULL,
    u_requests        bigint NOT NULL,
    u_rounds          bigint NOT NULL,
    u_drafted         bigint NOT NULL,
    u_accepted        bigint NOT NULL,
    u_judged          bigint NOT NULL,
    draft_secs        double precision NOT NULL,
    verify_secs       double precision NOT NULL,
    e2e_secs          double precision NOT NULL,
    u_draft_secs      double precision NOT NULL,
    u_verify_secs     double precision NOT NULL,
    u_load_share      double precision NOT NULL,
    -- NULL: written by requests that kept no load (read as run alone).
    load_share        double precision,
    accepted_per_pos  bigint[] NOT NULL,
    ttft              bigint[] NOT NULL,
    itl               bigint[] NOT NULL,
    PRIMARY KEY (tenant, class, strategy, k, granularity, start)
);
CREATE INDEX history_by_start ON history (granularity, start);

-- Flushes already added: a flush retried after a lost reply is skipped, not counted twice.
CREATE TABLE history_flushes (
    id bytea PRIMARY KEY,
    at bigint NOT NULL
);
