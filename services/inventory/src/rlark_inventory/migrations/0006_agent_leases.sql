-- One active agent per cluster (ADR 0018): the lease a cluster's agent holds, renewed every few seconds.
-- `epoch` grows each time another agent process (`holder`) takes the lease; reports carry it and consumers
-- refuse older ones. Expiry is judged by this database's clock only (`now()`), never an agent's.
CREATE TABLE agent_leases (
    cluster    text PRIMARY KEY REFERENCES clusters (name) ON DELETE CASCADE,
    holder     text NOT NULL,
    epoch      bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
