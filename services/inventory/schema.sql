CREATE TABLE public.agent_epochs (
    consumer text NOT NULL,
    cluster text NOT NULL,
    epoch bigint NOT NULL
);

CREATE TABLE public.agent_leases (
    cluster text NOT NULL,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE public.clusters (
    name text NOT NULL,
    display_name text DEFAULT ''::text NOT NULL,
    category text DEFAULT ''::text NOT NULL,
    region text DEFAULT ''::text NOT NULL,
    runtime text NOT NULL,
    pod_cidrs text[] DEFAULT '{}'::text[] NOT NULL,
    service_cidrs text[] DEFAULT '{}'::text[] NOT NULL,
    labels jsonb DEFAULT '{}'::jsonb NOT NULL,
    credential_hash bytea NOT NULL,
    credential_rotated_at timestamp with time zone DEFAULT now() NOT NULL,
    last_session_at timestamp with time zone,
    online boolean DEFAULT false NOT NULL,
    last_seen timestamp with time zone,
    agent_version text DEFAULT ''::text NOT NULL,
    created_by text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    hostpath_allow text[] DEFAULT '{}'::text[] NOT NULL,
    not_enforced text[] DEFAULT '{}'::text[] NOT NULL,
    unmountable text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT clusters_runtime_check CHECK ((runtime = ANY (ARRAY['local'::text, 'kubernetes'::text])))
);

CREATE TABLE public.inbox (
    consumer text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.leases (
    name text NOT NULL,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    acquired_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE public.nodes (
    cluster text NOT NULL,
    name text NOT NULL,
    ready boolean NOT NULL,
    schedulable boolean NOT NULL,
    gone boolean DEFAULT false NOT NULL,
    cordon_requested boolean,
    gpu_count integer DEFAULT 0 NOT NULL,
    gpu_model text DEFAULT ''::text NOT NULL,
    gpu_allocatable integer DEFAULT 0 NOT NULL,
    gpu_allocated integer DEFAULT 0 NOT NULL,
    cpu_millis bigint DEFAULT 0 NOT NULL,
    cpu_allocatable_millis bigint DEFAULT 0 NOT NULL,
    cpu_allocated_millis bigint DEFAULT 0 NOT NULL,
    memory_bytes bigint DEFAULT 0 NOT NULL,
    memory_allocatable_bytes bigint DEFAULT 0 NOT NULL,
    memory_allocated_bytes bigint DEFAULT 0 NOT NULL,
    labels jsonb DEFAULT '{}'::jsonb NOT NULL,
    addresses jsonb DEFAULT '[]'::jsonb NOT NULL,
    search text DEFAULT ''::text NOT NULL,
    observed_at timestamp with time zone NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    gpu_allocated_foreign integer DEFAULT 0 NOT NULL
);

CREATE TABLE public.outbox (
    seq bigint NOT NULL,
    event_id text NOT NULL,
    topic text NOT NULL,
    key text NOT NULL,
    payload bytea NOT NULL,
    headers jsonb,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE SEQUENCE public.outbox_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.outbox_seq_seq OWNED BY public.outbox.seq;

CREATE TABLE public.platform_schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.workers (
    cluster text NOT NULL,
    worker_id text NOT NULL,
    job_id text NOT NULL,
    node text DEFAULT ''::text NOT NULL,
    phase text NOT NULL,
    active boolean NOT NULL,
    reported_at timestamp with time zone NOT NULL
);

ALTER TABLE ONLY public.outbox ALTER COLUMN seq SET DEFAULT nextval('public.outbox_seq_seq'::regclass);

ALTER TABLE ONLY public.agent_epochs
    ADD CONSTRAINT agent_epochs_pkey PRIMARY KEY (consumer, cluster);

ALTER TABLE ONLY public.agent_leases
    ADD CONSTRAINT agent_leases_pkey PRIMARY KEY (cluster);

ALTER TABLE ONLY public.clusters
    ADD CONSTRAINT clusters_credential_hash_key UNIQUE (credential_hash);

ALTER TABLE ONLY public.clusters
    ADD CONSTRAINT clusters_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (consumer, event_id);

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (cluster, name);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_event_id_key UNIQUE (event_id);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (seq);

ALTER TABLE ONLY public.platform_schema_migrations
    ADD CONSTRAINT platform_schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (cluster, worker_id);

CREATE INDEX clusters_online_last_seen ON public.clusters USING btree (last_seen) WHERE online;

CREATE INDEX nodes_labels ON public.nodes USING gin (labels jsonb_path_ops);

CREATE INDEX nodes_name ON public.nodes USING btree (name);

CREATE INDEX workers_active_node ON public.workers USING btree (cluster, node) WHERE active;

CREATE INDEX workers_inactive_reported ON public.workers USING btree (reported_at) WHERE (NOT active);

ALTER TABLE ONLY public.agent_leases
    ADD CONSTRAINT agent_leases_cluster_fkey FOREIGN KEY (cluster) REFERENCES public.clusters(name) ON DELETE CASCADE;

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_cluster_fkey FOREIGN KEY (cluster) REFERENCES public.clusters(name) ON DELETE CASCADE;
