-- A worker's GPUs are part of a node's reported gpu_allocated only in observations made after the worker
-- existed. Both times come from the same agent's clock: the node's observation time, and the time of the
-- report that first said the worker exists. Without them, a worker report that overtakes the node update
-- (they arrive through different consumers) would briefly count those GPUs as free.
ALTER TABLE nodes ADD COLUMN observed_at timestamptz;
ALTER TABLE workers ADD COLUMN present_since timestamptz;
