-- The highest priority a project's jobs may ask (issue 20): without a cap any user could submit at 100 and be
-- admitted, and preempt, ahead of everyone. NULL: no cap. Checked at submission (spec.priority).
ALTER TABLE projects ADD COLUMN max_priority integer CHECK (max_priority BETWEEN -100 AND 100);
