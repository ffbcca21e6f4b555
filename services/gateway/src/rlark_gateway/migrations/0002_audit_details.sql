-- Facts of an audited action that are not a request's: an SSH session's worker, start, end and bytes each way.
ALTER TABLE audit_log ADD COLUMN details jsonb;
