"""The scheduler's pure domain: job spec, validation, capacity and placement (no I/O)."""
