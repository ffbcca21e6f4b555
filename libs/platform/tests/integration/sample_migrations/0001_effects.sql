CREATE TABLE effects (
    event_id text NOT NULL,
    subject  text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
