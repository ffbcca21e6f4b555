-- The networks each cluster's agent observed (agent.nodes.observed.v1): the union of its nodes' pod
-- CIDRs and its service CIDRs. Overlap checks use declared ∪ observed, so a cluster that declared no
-- CIDRs still keeps domains off its real networks. networks_observed_at: the snapshot's time (older
-- snapshots are ignored); NULL until the agent's first. A snapshot that arrives before inventory's
-- cluster state inserts the row with observed_at '-infinity', so any cluster state is newer.
ALTER TABLE clusters
    ADD COLUMN observed_pod_cidrs     cidr[]      NOT NULL DEFAULT '{}',
    ADD COLUMN observed_service_cidrs cidr[]      NOT NULL DEFAULT '{}',
    ADD COLUMN networks_observed_at   timestamptz;
