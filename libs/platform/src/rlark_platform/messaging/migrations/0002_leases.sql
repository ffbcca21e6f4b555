-- Leases: one row per singleton loop of this service (the placement loop, the outbox relay, ...). A
-- process leads while it holds the row's current epoch and the lease has not expired by the database's
-- clock; taking a free or expired lease bumps the epoch, and every write a leader makes checks its
-- epoch in the same transaction (rlark_platform.db.lease), so a deposed leader's writes are refused.
CREATE TABLE leases (
    name         text        PRIMARY KEY,
    holder       text        NOT NULL,
    epoch        bigint      NOT NULL,
    acquired_at  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);
