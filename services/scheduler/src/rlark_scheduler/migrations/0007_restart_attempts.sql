-- Restart attempts (ADR 0014). A job's current attempt (numbered from 1) and the restarts its
-- policy used; restart_at: a restarting job is not placed before then (backoff, and the old attempt's
-- teardown) — apart from hold_until, which netdomain's releases clear for jobs waiting for addresses.
ALTER TABLE jobs ADD COLUMN attempt integer NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN restarts integer NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN restart_at timestamptz;

-- Every attempt's workers are kept (their logs and outputs are keyed by worker id); "the job's
-- workers" are those of its current attempt. Attempt K >= 2 has its own worker ids.
ALTER TABLE workers ADD COLUMN attempt integer NOT NULL DEFAULT 1;
ALTER TABLE workers DROP CONSTRAINT workers_job_id_role_index_key;
ALTER TABLE workers ADD CONSTRAINT workers_job_id_attempt_role_index_key UNIQUE (job_id, attempt, role, index);
