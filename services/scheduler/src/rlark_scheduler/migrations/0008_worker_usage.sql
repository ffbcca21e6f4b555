-- Workers' resource usage (issue 19 item 1, ADR 0017). step_s 0: a sample as its agent sent it (kept
-- usage_raw_retention_s, 1 h by default); step_s 60: a minute's average of those (kept usage_retention_s,
-- 7 days; samples: how many it averages, so a late sample folds in). gpu_util_pct is the mean over the worker's GPUs (NULL: none); gpus the raw per-GPU list.
CREATE TABLE worker_usage (
    worker_id text NOT NULL,
    step_s integer NOT NULL,
    at timestamptz NOT NULL,
    job_id text NOT NULL,
    cpu_cores_used real NOT NULL,
    memory_bytes bigint NOT NULL,
    gpu_count integer NOT NULL DEFAULT 0,
    gpu_util_pct real,
    gpu_memory_used_bytes bigint NOT NULL DEFAULT 0,
    gpu_memory_total_bytes bigint NOT NULL DEFAULT 0,
    gpus jsonb NOT NULL DEFAULT '[]'::jsonb,
    samples integer NOT NULL DEFAULT 1,
    PRIMARY KEY (worker_id, step_s, at)
);
CREATE INDEX worker_usage_job_at ON worker_usage (job_id, at);
CREATE INDEX worker_usage_step_at ON worker_usage (step_s, at);

-- Set while the job's "idle GPUs" warning stands (written once per idle spell).
ALTER TABLE jobs ADD COLUMN gpus_idle_since timestamptz;
