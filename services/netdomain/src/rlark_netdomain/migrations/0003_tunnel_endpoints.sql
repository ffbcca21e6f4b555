-- Where each cluster's agent accepts a domain's SSH tunnels, and the Ed25519 public key its peers
-- pin, as last announced (agent.tunnel.endpoint_announced.v1) with a valid agent token of that very
-- cluster. Republished to the agents in the domain's tunnel topology. Only clusters of the domain's
-- topology have a row: a cluster leaving the topology loses it.
CREATE TABLE tunnel_endpoints (
    domain       text        NOT NULL REFERENCES domains (name) ON DELETE CASCADE,
    cluster      text        NOT NULL,
    host         text        NOT NULL,
    port         integer     NOT NULL CHECK (port BETWEEN 1 AND 65535),
    public_key   text        NOT NULL,
    announced_at timestamptz NOT NULL,
    PRIMARY KEY (domain, cluster)
);
