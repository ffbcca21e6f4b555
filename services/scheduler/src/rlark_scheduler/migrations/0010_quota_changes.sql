-- A quota write (create, change, delete a project) queues a `quotas` change so the placement loop re-reads
-- every project's quota at once (ADR 0020).
ALTER TABLE capacity_changes DROP CONSTRAINT capacity_changes_kind_check;
ALTER TABLE capacity_changes ADD CONSTRAINT capacity_changes_kind_check
    CHECK (kind IN ('node', 'cluster', 'job', 'all', 'quotas'));
