-- Failed password checks, shared by every gateway replica (login throttling; domain/throttle.py).
-- One row per failure and key: scope 'user_address' (key "<address> <username>"), 'user' or 'address'.
-- Times are the database's, so replicas agree. Rows older than the window are swept as failures come in.
CREATE TABLE login_failures (
    id        bigserial PRIMARY KEY,
    scope     text NOT NULL CHECK (scope IN ('user_address', 'user', 'address')),
    key       text NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_failures_key ON login_failures (scope, key, failed_at DESC);
CREATE INDEX login_failures_failed_at ON login_failures (failed_at);
