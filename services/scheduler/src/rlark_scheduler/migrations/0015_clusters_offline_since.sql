-- When the scheduler learnt a cluster went offline (NULL while online): its Starting/Running jobs are Lost
-- only once it has stayed offline for cluster_offline_grace_s (ADR 0029).
ALTER TABLE clusters ADD COLUMN offline_since timestamptz;
UPDATE clusters SET offline_since = now() WHERE NOT online;
