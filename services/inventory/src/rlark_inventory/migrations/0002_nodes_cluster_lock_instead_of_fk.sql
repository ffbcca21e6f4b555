-- Ingest writes hundreds of nodes per statement, and the foreign key checked the cluster once per row
-- (about half the statement's execution time). Each report now locks its cluster row FOR KEY SHARE
-- once (repository.lock_cluster_for_ingest) — the same lock the per-row check took — and deleting a
-- cluster deletes its nodes explicitly (repository.delete_cluster).
ALTER TABLE nodes DROP CONSTRAINT nodes_cluster_fkey;
