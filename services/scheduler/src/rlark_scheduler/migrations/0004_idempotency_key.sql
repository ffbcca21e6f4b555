-- Idempotent submission (POST /api/v1/jobs with an Idempotency-Key header): the client's key and a
-- digest of the document it came with. A repeat with the same key and document gets this job back;
-- the same key with another document is refused. Keys are unique per owner; jobs without one (NULL)
-- are not constrained.
ALTER TABLE jobs ADD COLUMN idempotency_key text;
ALTER TABLE jobs ADD COLUMN idempotency_fingerprint text;
ALTER TABLE jobs ADD CONSTRAINT jobs_owner_idempotency_key UNIQUE (owner, idempotency_key);
