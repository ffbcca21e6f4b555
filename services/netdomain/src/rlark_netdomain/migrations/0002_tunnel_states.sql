-- Each link of a domain as each cluster's agent last reported it (agent.tunnel.state_changed.v1),
-- shown with the domain. since: when the link entered its current state (kept while it repeats).
CREATE TABLE tunnel_states (
    domain         text             NOT NULL REFERENCES domains (name) ON DELETE CASCADE,
    cluster        text             NOT NULL,
    peer           text             NOT NULL,
    state          text             NOT NULL,
    since          timestamptz      NOT NULL,
    rtt_ms         double precision,
    bytes_sent     bigint           NOT NULL DEFAULT 0,
    bytes_received bigint           NOT NULL DEFAULT 0,
    last_error     text             NOT NULL DEFAULT '',
    reported_at    timestamptz      NOT NULL,
    PRIMARY KEY (domain, cluster, peer)
);
