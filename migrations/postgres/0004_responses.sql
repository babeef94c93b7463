-- Stored responses (the Responses API's `store`), per tenant, until they expire.
CREATE TABLE responses (
    tenant     TEXT   NOT NULL,
    id         TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    body       TEXT   NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX responses_expiry ON responses (expires_at);
