-- A cluster's hostPath policy: the host directories (normalised prefixes, rlark_contracts.hostpaths) that
-- workers may mount. Empty — every existing cluster after this migration — allows none (ADR 0006).
ALTER TABLE clusters ADD COLUMN hostpath_allow text[] NOT NULL DEFAULT '{}';
