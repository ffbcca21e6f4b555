-- The part of gpu_allocated that RLark workers placed on the node do not hold (pods RLark did not
-- create; on the local runtime the machine's shared GPUs held by workers of other virtual nodes), as the
-- agent reports it (0 from agents that do not know).
ALTER TABLE nodes ADD COLUMN gpu_allocated_foreign integer NOT NULL DEFAULT 0;
