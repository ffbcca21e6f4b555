-- Outbox: events written in the same transaction as the state change they describe; the relay
-- publishes rows whose published_at is NULL (never "seq greater than the last one published", because
-- transactions commit out of seq order).
CREATE TABLE outbox (
    seq          bigserial PRIMARY KEY,
    event_id     text        NOT NULL UNIQUE,
    topic        text        NOT NULL,
    key          text        NOT NULL,
    payload      bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX outbox_unpublished ON outbox (seq) WHERE published_at IS NULL;
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Inbox: one row per (consumer, event) claimed in the consumer's transaction, so effects apply once
-- even when Kafka delivers an event twice.
CREATE TABLE inbox (
    consumer    text        NOT NULL,
    event_id    text        NOT NULL,
    event_type  text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
