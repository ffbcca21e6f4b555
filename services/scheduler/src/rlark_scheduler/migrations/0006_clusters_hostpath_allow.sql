-- The cluster's hostPath policy as inventory publishes it (inventory.cluster.*: hostpath_allow): the
-- normalised host directories workers may mount. Empty allows none (ADR 0006); submission checks every
-- hostPath source against it.
ALTER TABLE clusters ADD COLUMN hostpath_allow text[] NOT NULL DEFAULT '{}';
