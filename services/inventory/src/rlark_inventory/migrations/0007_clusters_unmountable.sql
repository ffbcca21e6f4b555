-- Mount types a cluster's agent reports it is not set up for (its latest heartbeat; rlark_contracts.runtimes):
-- a Kubernetes agent naming no object-storage CSI driver reports objectStorage. Carried on in ClusterState so
-- the scheduler refuses such mounts at preview. Empty: the runtime's table alone decides.
ALTER TABLE clusters ADD COLUMN unmountable text[] NOT NULL DEFAULT '{}';
