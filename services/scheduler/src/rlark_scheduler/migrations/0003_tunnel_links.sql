-- Each link of a network domain as each cluster's agent last reported it (agent.tunnel.state_changed.v1).
-- since: when the link entered its current state as that agent saw it (kept while the state repeats).
CREATE TABLE tunnel_links (
    domain         text             NOT NULL,
    cluster        text             NOT NULL,
    peer           text             NOT NULL,
    up             boolean          NOT NULL,
    since          timestamptz      NOT NULL,
    last_error     text             NOT NULL DEFAULT '',
    rtt_ms         double precision,
    bytes_sent     bigint           NOT NULL DEFAULT 0,
    bytes_received bigint           NOT NULL DEFAULT 0,
    reported_at    timestamptz      NOT NULL,
    PRIMARY KEY (domain, cluster, peer)
);

-- A job whose domain link is down carries the outage as its reason (status unchanged); the reason it
-- had before comes back when the link does.
ALTER TABLE jobs ADD COLUMN tunnel_reason text;
ALTER TABLE jobs ADD COLUMN reason_before_tunnel text;
