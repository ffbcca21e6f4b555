-- Outbox: events written in the same transaction as the state change they describe. The relay publishes
-- the oldest rows present and deletes exactly the rows the broker acknowledged (never "seq greater than the
-- last one published": transactions commit out of seq order). Kafka keeps the history, not this table.
CREATE TABLE outbox (
    seq          bigserial PRIMARY KEY,
    event_id     text        NOT NULL UNIQUE,
    topic        text        NOT NULL,
    key          text        NOT NULL,
    payload      bytea       NOT NULL,
    headers      jsonb,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Inbox: one row per (consumer, event) claimed in the consumer's transaction, so effects apply once
-- even when Kafka delivers an event twice.
CREATE TABLE inbox (
    consumer    text        NOT NULL,
    event_id    text        NOT NULL,
    event_type  text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
