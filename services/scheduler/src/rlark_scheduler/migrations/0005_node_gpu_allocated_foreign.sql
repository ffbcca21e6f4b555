-- Of a node's gpu_allocated, what RLark workers placed on it do not hold, as its agent reports it
-- (inventory.nodes' gpu_allocated_foreign; 0 from agents that do not know). The capacity model takes
-- the larger of it and gpu_allocated minus the present workers' GPUs (domain.capacity.gpus_used_by_others).
ALTER TABLE nodes ADD COLUMN gpu_allocated_foreign integer NOT NULL DEFAULT 0;
