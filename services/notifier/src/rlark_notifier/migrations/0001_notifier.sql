-- Endpoints users register, the jobs the notifier has seen (whose is which), and the durable delivery
-- queue with its per-attempt log. Secrets are stored sealed (AES-GCM, rlark_notifier.domain.sealing).
CREATE TABLE endpoints (
    id            uuid        PRIMARY KEY,
    owner         text        NOT NULL,
    name          text        NOT NULL,
    kind          text        NOT NULL CHECK (kind IN ('json', 'slack', 'feishu', 'dingtalk')),
    url           text        NOT NULL,
    secret_sealed bytea,
    scope         text        NOT NULL CHECK (scope IN ('own', 'all')),
    -- Filters: empty arrays mean every state / every job the scope covers.
    states        text[]      NOT NULL DEFAULT '{}',
    job_ids       text[]      NOT NULL DEFAULT '{}',
    language      text        NOT NULL DEFAULT 'en',
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT endpoints_owner_name UNIQUE (owner, name)
);
CREATE INDEX endpoints_owner ON endpoints (owner);

-- Read model of scheduler.jobs: who owns a job (ownership of job filters, names in messages).
CREATE TABLE jobs (
    job_id   text        PRIMARY KEY,
    owner    text        NOT NULL,
    name     text        NOT NULL DEFAULT '',
    seen_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per (endpoint, event): enqueued in the consumer's inbox transaction, so exactly once.
-- An endpoint's pending rows go out one at a time in id order (a job's lifecycle arrives in order).
CREATE TABLE deliveries (
    id               bigserial   PRIMARY KEY,
    endpoint_id      uuid        NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    event_id         text        NOT NULL,
    job_id           text        NOT NULL,
    to_status        text        NOT NULL,
    notification     jsonb       NOT NULL,
    event_at         timestamptz NOT NULL,
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_status_code integer,
    last_error       text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    CONSTRAINT deliveries_endpoint_event UNIQUE (endpoint_id, event_id)
);
CREATE INDEX deliveries_pending ON deliveries (endpoint_id, id) WHERE status = 'pending';
CREATE INDEX deliveries_endpoint_recent ON deliveries (endpoint_id, id DESC);

-- The delivery log: every attempt, its answer's status code (none when it never got one) and error.
CREATE TABLE delivery_attempts (
    id           bigserial   PRIMARY KEY,
    delivery_id  bigint      NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempt      integer     NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    status_code  integer,
    error        text        NOT NULL DEFAULT '',
    duration_ms  integer     NOT NULL,
    CONSTRAINT delivery_attempts_once UNIQUE (delivery_id, attempt)
);
