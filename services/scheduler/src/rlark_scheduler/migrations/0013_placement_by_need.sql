-- Placement by need (ADR 0026): the scheduler chooses clusters for roles that name none, so it keeps what it
-- chooses by — each cluster's labels, region and category as inventory publishes them (inventory.cluster.*),
-- the clusters each network domain joins (netdomain.domain.*: empty joins every cluster), and the round trip
-- last measured between two clusters' agents (agent.tunnel.state_changed.v1), kept after the link closes.
ALTER TABLE clusters ADD COLUMN labels jsonb NOT NULL DEFAULT '{}';
ALTER TABLE clusters ADD COLUMN category text NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN region text NOT NULL DEFAULT '';
ALTER TABLE network_domains ADD COLUMN clusters text[] NOT NULL DEFAULT '{}';

-- One row per pair of clusters (a < b): whichever side reported last, in any domain.
CREATE TABLE cluster_links (
    a           text             NOT NULL,
    b           text             NOT NULL,
    rtt_ms      double precision NOT NULL,
    measured_at timestamptz      NOT NULL,
    PRIMARY KEY (a, b),
    CHECK (a < b)
);

-- A domain change re-reads every domain; a new round trip re-reads every link (preferences only).
ALTER TABLE capacity_changes DROP CONSTRAINT capacity_changes_kind_check;
ALTER TABLE capacity_changes ADD CONSTRAINT capacity_changes_kind_check
    CHECK (kind IN ('node', 'cluster', 'job', 'all', 'quotas', 'domains', 'links'));
