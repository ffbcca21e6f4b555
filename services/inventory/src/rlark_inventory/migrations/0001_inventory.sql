-- Clusters an admin registered. The agent credential is stored only as its SHA-256 (see
-- domain/credentials.py for why a fast hash is right for a 256-bit random secret).
CREATE TABLE clusters (
    name                  text        PRIMARY KEY,
    display_name          text        NOT NULL DEFAULT '',
    category              text        NOT NULL DEFAULT '',
    region                text        NOT NULL DEFAULT '',
    runtime               text        NOT NULL CHECK (runtime IN ('local', 'kubernetes')),
    pod_cidrs             text[]      NOT NULL DEFAULT '{}',
    service_cidrs         text[]      NOT NULL DEFAULT '{}',
    labels                jsonb       NOT NULL DEFAULT '{}'::jsonb,
    credential_hash       bytea       NOT NULL UNIQUE,
    credential_rotated_at timestamptz NOT NULL DEFAULT now(),
    last_session_at       timestamptz,
    online                boolean     NOT NULL DEFAULT false,
    last_seen             timestamptz,
    agent_version         text        NOT NULL DEFAULT '',
    created_by            text        NOT NULL DEFAULT '',
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX clusters_online_last_seen ON clusters (last_seen) WHERE online;

-- Nodes as the agents observe them. A node missing from a complete observation is kept with gone=true
-- so its history and compacted-topic state stay consistent. cordon_requested is the admin's desired
-- cordoned state while the agent has not reported it yet (NULL when nothing is pending).
CREATE TABLE nodes (
    cluster                  text        NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    name                     text        NOT NULL,
    ready                    boolean     NOT NULL,
    schedulable              boolean     NOT NULL,
    gone                     boolean     NOT NULL DEFAULT false,
    cordon_requested         boolean,
    gpu_count                integer     NOT NULL DEFAULT 0,
    gpu_model                text        NOT NULL DEFAULT '',
    gpu_allocatable          integer     NOT NULL DEFAULT 0,
    gpu_allocated            integer     NOT NULL DEFAULT 0,
    cpu_millis               bigint      NOT NULL DEFAULT 0,
    cpu_allocatable_millis   bigint      NOT NULL DEFAULT 0,
    cpu_allocated_millis     bigint      NOT NULL DEFAULT 0,
    memory_bytes             bigint      NOT NULL DEFAULT 0,
    memory_allocatable_bytes bigint      NOT NULL DEFAULT 0,
    memory_allocated_bytes   bigint      NOT NULL DEFAULT 0,
    labels                   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    addresses                jsonb       NOT NULL DEFAULT '[]'::jsonb,
    search                   text        NOT NULL DEFAULT '',
    observed_at              timestamptz NOT NULL,
    changed_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, name)
);
-- Selector filters are containment (labels @> '{"k": "v"}'): jsonb_path_ops is the smaller, faster GIN
-- operator class for exactly that operator.
CREATE INDEX nodes_labels ON nodes USING gin (labels jsonb_path_ops);
CREATE INDEX nodes_name ON nodes (name);

-- Workers the agents report, per node: enough for running-job counts, node details and the guard that
-- refuses deleting a cluster with work on it. Terminal rows are purged after a while.
CREATE TABLE workers (
    cluster    text        NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    worker_id  text        NOT NULL,
    job_id     text        NOT NULL,
    node       text        NOT NULL DEFAULT '',
    phase      text        NOT NULL,
    active     boolean     NOT NULL,
    reported_at timestamptz NOT NULL,
    PRIMARY KEY (cluster, worker_id)
);
CREATE INDEX workers_active_node ON workers (cluster, node) WHERE active;
CREATE INDEX workers_inactive_reported ON workers (reported_at) WHERE NOT active;
