-- The scheduler's own database. Read models (clusters, nodes, ssh_keys, network_domains) are copies of
-- other services' public state, rebuilt from their compacted topics; everything else is the scheduler's.

-- Clusters as inventory publishes them (inventory.clusters). No credentials ever reach this service.
CREATE TABLE clusters (
    name          text        PRIMARY KEY,
    runtime       text        NOT NULL DEFAULT 'kubernetes',
    online        boolean     NOT NULL DEFAULT false,
    pod_cidrs     text[]      NOT NULL DEFAULT '{}',
    service_cidrs text[]      NOT NULL DEFAULT '{}',
    deleted       boolean     NOT NULL DEFAULT false,
    changed_at    timestamptz NOT NULL DEFAULT now()
);

-- Nodes as inventory publishes them (inventory.nodes). gpu_allocated is what the cluster says is
-- requested on the node, RLark's own worker pods included (see handlers.node_state_for_model).
CREATE TABLE nodes (
    cluster         text        NOT NULL,
    name            text        NOT NULL,
    ready           boolean     NOT NULL,
    schedulable     boolean     NOT NULL,
    gone            boolean     NOT NULL DEFAULT false,
    gpu_count       integer     NOT NULL DEFAULT 0,
    gpu_model       text        NOT NULL DEFAULT '',
    gpu_allocatable integer     NOT NULL DEFAULT 0,
    gpu_allocated   integer     NOT NULL DEFAULT 0,
    labels          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    addresses       text[]      NOT NULL DEFAULT '{}',
    changed_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, name)
);

-- Users' SSH public keys (keys.keys): public material only.
CREATE TABLE ssh_keys (
    key_id      text PRIMARY KEY,
    owner       text NOT NULL,
    name        text NOT NULL,
    key_type    text NOT NULL DEFAULT '',
    fingerprint text NOT NULL DEFAULT '',
    public_key  text NOT NULL
);
CREATE INDEX ssh_keys_owner_name ON ssh_keys (owner, name);

-- Network domains (netdomain.domains).
CREATE TABLE network_domains (
    name text PRIMARY KEY,
    cidr text NOT NULL
);

-- Jobs. spec is the normalised document (render.normalized_document); submitted_seq orders FIFO.
-- pending holds the last pending explanation (reasons.PendingReason as JSON) while Pending.
-- hold_until: a job that may not be retried before then (its network domain had no free address).
-- address_request_id: the id of the last addresses_requested event, to match netdomain's answer.
CREATE TABLE jobs (
    id                 text        PRIMARY KEY,
    owner              text        NOT NULL,
    name               text        NOT NULL,
    spec               jsonb       NOT NULL,
    spec_yaml          text        NOT NULL,
    warnings           jsonb       NOT NULL DEFAULT '[]'::jsonb,
    status             text        NOT NULL,
    reason             text        NOT NULL DEFAULT '',
    details            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    priority           integer     NOT NULL DEFAULT 0,
    submitted_seq      bigserial   NOT NULL UNIQUE,
    network_domain     text,
    domain_cidr        text,
    address_request_id text,
    hold_until         timestamptz,
    pending            jsonb,
    ssh_key_ids        text[]      NOT NULL DEFAULT '{}',
    ssh_key_names      text[]      NOT NULL DEFAULT '{}',
    ssh_public_keys    text[]      NOT NULL DEFAULT '{}',
    exit_code          integer,
    ray_nodes_joined   integer,
    ray_nodes_expected integer,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    scheduled_at       timestamptz,
    started_at         timestamptz,
    ended_at           timestamptz
);
CREATE INDEX jobs_owner_created ON jobs (owner, created_at DESC);
CREATE INDEX jobs_status ON jobs (status);

-- Workers of placed jobs, one per (job, role, index); ids are "<job_id>-<role>-<index>".
-- present: the agent reported the worker exists and it has not ended (its GPUs are then part of
-- the node's gpu_allocated as the cluster reports it).
CREATE TABLE workers (
    id          text        PRIMARY KEY,
    job_id      text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    role        text        NOT NULL,
    index       integer     NOT NULL,
    rank        integer     NOT NULL,
    is_header   boolean     NOT NULL,
    cluster     text        NOT NULL,
    node        text        NOT NULL,
    gpus        integer     NOT NULL,
    virtual_ip  text,
    address     text        NOT NULL DEFAULT '',
    phase       text        NOT NULL DEFAULT 'Placed',
    exit_code   integer,
    reason      text        NOT NULL DEFAULT '',
    ray_joined  boolean     NOT NULL DEFAULT false,
    present     boolean     NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, role, index)
);
CREATE INDEX workers_node ON workers (cluster, node);

-- The job's timeline: status transitions (kind 'status'), worker phase changes ('worker') and pending
-- reason changes ('pending'). seq is the cursor of the events stream.
CREATE TABLE job_events (
    seq         bigserial   PRIMARY KEY,
    job_id      text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    kind        text        NOT NULL,
    from_status text        NOT NULL DEFAULT '',
    to_status   text        NOT NULL DEFAULT '',
    worker_id   text,
    phase       text,
    reason      text        NOT NULL DEFAULT '',
    details     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    at          timestamptz NOT NULL
);
CREATE INDEX job_events_job ON job_events (job_id, seq);

-- Worker output lines, kept after the workers are gone. (worker_id, seq) dedupes redelivered batches;
-- cursor is the insertion order across a job's workers (the logs stream's position).
CREATE TABLE worker_logs (
    cursor    bigserial PRIMARY KEY,
    job_id    text      NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    worker_id text      NOT NULL,
    seq       bigint    NOT NULL,
    line      text      NOT NULL,
    UNIQUE (worker_id, seq)
);
CREATE INDEX worker_logs_job ON worker_logs (job_id, cursor);

-- Output manifests the agents list at the end of a worker.
CREATE TABLE job_outputs (
    job_id     text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    worker_id  text        NOT NULL,
    files      jsonb       NOT NULL,
    truncated  boolean     NOT NULL DEFAULT false,
    listed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, worker_id)
);

-- Changes the placement loop has not applied to its in-memory capacity model yet: consumers and the
-- API insert a row in the same transaction as the change and NOTIFY scheduler_changes; the loop reads
-- the rows present, applies the current state of what they name, and deletes exactly those rows.
CREATE TABLE capacity_changes (
    id   bigserial PRIMARY KEY,
    kind text      NOT NULL CHECK (kind IN ('node', 'cluster', 'job', 'all')),
    key  text      NOT NULL
);
