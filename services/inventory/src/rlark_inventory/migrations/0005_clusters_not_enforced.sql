-- What a cluster's agent reports it cannot enforce on its workers (its latest heartbeat; ADR 0007): a local
-- cluster without cgroup v2 CPU and memory controllers, or whose agent is not root. Empty when everything is.
ALTER TABLE clusters ADD COLUMN not_enforced text[] NOT NULL DEFAULT '{}';
