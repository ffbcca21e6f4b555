-- Mount types a cluster's agent reports it is not set up for (inventory's ClusterState.unmountable; e.g.
-- objectStorage on a Kubernetes cluster naming no CSI driver): validation and placement refuse them there.
ALTER TABLE clusters ADD COLUMN unmountable text[] NOT NULL DEFAULT '{}';
