CREATE TABLE public.agent_epochs (
    consumer text NOT NULL,
    cluster text NOT NULL,
    epoch bigint NOT NULL
);

CREATE TABLE public.capacity_changes (
    id bigint NOT NULL,
    kind text NOT NULL,
    key text NOT NULL,
    CONSTRAINT capacity_changes_kind_check CHECK ((kind = ANY (ARRAY['node'::text, 'cluster'::text, 'job'::text, 'all'::text, 'quotas'::text, 'domains'::text, 'links'::text])))
);

CREATE SEQUENCE public.capacity_changes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.capacity_changes_id_seq OWNED BY public.capacity_changes.id;

CREATE TABLE public.cluster_links (
    a text NOT NULL,
    b text NOT NULL,
    rtt_ms double precision NOT NULL,
    measured_at timestamp with time zone NOT NULL,
    CONSTRAINT cluster_links_check CHECK ((a < b))
);

CREATE TABLE public.clusters (
    name text NOT NULL,
    runtime text DEFAULT 'kubernetes'::text NOT NULL,
    online boolean DEFAULT false NOT NULL,
    pod_cidrs text[] DEFAULT '{}'::text[] NOT NULL,
    service_cidrs text[] DEFAULT '{}'::text[] NOT NULL,
    deleted boolean DEFAULT false NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    hostpath_allow text[] DEFAULT '{}'::text[] NOT NULL,
    labels jsonb DEFAULT '{}'::jsonb NOT NULL,
    category text DEFAULT ''::text NOT NULL,
    region text DEFAULT ''::text NOT NULL,
    unmountable text[] DEFAULT '{}'::text[] NOT NULL,
    offline_since timestamp with time zone
);

CREATE TABLE public.inbox (
    consumer text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.job_events (
    seq bigint NOT NULL,
    job_id text NOT NULL,
    kind text NOT NULL,
    from_status text DEFAULT ''::text NOT NULL,
    to_status text DEFAULT ''::text NOT NULL,
    worker_id text,
    phase text,
    reason text DEFAULT ''::text NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    at timestamp with time zone NOT NULL
);

CREATE SEQUENCE public.job_events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.job_events_seq_seq OWNED BY public.job_events.seq;

CREATE TABLE public.job_outputs (
    job_id text NOT NULL,
    worker_id text NOT NULL,
    files jsonb NOT NULL,
    truncated boolean DEFAULT false NOT NULL,
    listed_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.jobs (
    id text NOT NULL,
    owner text NOT NULL,
    name text NOT NULL,
    spec jsonb NOT NULL,
    spec_yaml text NOT NULL,
    warnings jsonb DEFAULT '[]'::jsonb NOT NULL,
    status text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    submitted_seq bigint NOT NULL,
    network_domain text,
    domain_cidr text,
    address_request_id text,
    hold_until timestamp with time zone,
    pending jsonb,
    ssh_key_ids text[] DEFAULT '{}'::text[] NOT NULL,
    ssh_key_names text[] DEFAULT '{}'::text[] NOT NULL,
    ssh_public_keys text[] DEFAULT '{}'::text[] NOT NULL,
    exit_code integer,
    ray_nodes_joined integer,
    ray_nodes_expected integer,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    scheduled_at timestamp with time zone,
    started_at timestamp with time zone,
    ended_at timestamp with time zone,
    tunnel_reason text,
    reason_before_tunnel text,
    idempotency_key text,
    idempotency_fingerprint text,
    attempt integer DEFAULT 1 NOT NULL,
    restarts integer DEFAULT 0 NOT NULL,
    restart_at timestamp with time zone,
    gpus_idle_since timestamp with time zone
);

CREATE SEQUENCE public.jobs_submitted_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.jobs_submitted_seq_seq OWNED BY public.jobs.submitted_seq;

CREATE TABLE public.leases (
    name text NOT NULL,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    acquired_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE public.network_domains (
    name text NOT NULL,
    cidr text NOT NULL,
    clusters text[] DEFAULT '{}'::text[] NOT NULL
);

CREATE TABLE public.nodes (
    cluster text NOT NULL,
    name text NOT NULL,
    ready boolean NOT NULL,
    schedulable boolean NOT NULL,
    gone boolean DEFAULT false NOT NULL,
    gpu_count integer DEFAULT 0 NOT NULL,
    gpu_model text DEFAULT ''::text NOT NULL,
    gpu_allocatable integer DEFAULT 0 NOT NULL,
    gpu_allocated integer DEFAULT 0 NOT NULL,
    labels jsonb DEFAULT '{}'::jsonb NOT NULL,
    addresses text[] DEFAULT '{}'::text[] NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    observed_at timestamp with time zone,
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

CREATE TABLE public.project_members (
    project text NOT NULL,
    username text NOT NULL
);

CREATE TABLE public.projects (
    name text NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    gpus integer NOT NULL,
    clusters jsonb DEFAULT '{}'::jsonb NOT NULL,
    models jsonb DEFAULT '{}'::jsonb NOT NULL,
    borrowing_limit integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_by text NOT NULL,
    max_priority integer,
    CONSTRAINT projects_borrowing_limit_check CHECK ((borrowing_limit >= 0)),
    CONSTRAINT projects_gpus_check CHECK ((gpus >= 0)),
    CONSTRAINT projects_max_priority_check CHECK (((max_priority >= '-100'::integer) AND (max_priority <= 100)))
);

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.secret_names (
    secret_id text NOT NULL,
    scope text NOT NULL,
    owner text NOT NULL,
    name text NOT NULL,
    version integer NOT NULL,
    CONSTRAINT secret_names_scope_check CHECK ((scope = ANY (ARRAY['user'::text, 'project'::text])))
);

CREATE TABLE public.ssh_keys (
    key_id text NOT NULL,
    owner text NOT NULL,
    name text NOT NULL,
    key_type text DEFAULT ''::text NOT NULL,
    fingerprint text DEFAULT ''::text NOT NULL,
    public_key text NOT NULL
);

CREATE TABLE public.tunnel_links (
    domain text NOT NULL,
    cluster text NOT NULL,
    peer text NOT NULL,
    up boolean NOT NULL,
    since timestamp with time zone NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    rtt_ms double precision,
    bytes_sent bigint DEFAULT 0 NOT NULL,
    bytes_received bigint DEFAULT 0 NOT NULL,
    reported_at timestamp with time zone NOT NULL
);

CREATE TABLE public.worker_logs (
    cursor bigint NOT NULL,
    job_id text NOT NULL,
    worker_id text NOT NULL,
    seq bigint NOT NULL,
    line text NOT NULL
);

CREATE SEQUENCE public.worker_logs_cursor_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.worker_logs_cursor_seq OWNED BY public.worker_logs.cursor;

CREATE TABLE public.worker_usage (
    worker_id text NOT NULL,
    step_s integer NOT NULL,
    at timestamp with time zone NOT NULL,
    job_id text NOT NULL,
    cpu_cores_used real NOT NULL,
    memory_bytes bigint NOT NULL,
    gpu_count integer DEFAULT 0 NOT NULL,
    gpu_util_pct real,
    gpu_memory_used_bytes bigint DEFAULT 0 NOT NULL,
    gpu_memory_total_bytes bigint DEFAULT 0 NOT NULL,
    gpus jsonb DEFAULT '[]'::jsonb NOT NULL,
    samples integer DEFAULT 1 NOT NULL
);

CREATE TABLE public.workers (
    id text NOT NULL,
    job_id text NOT NULL,
    role text NOT NULL,
    index integer NOT NULL,
    rank integer NOT NULL,
    is_header boolean NOT NULL,
    cluster text NOT NULL,
    node text NOT NULL,
    gpus integer NOT NULL,
    virtual_ip text,
    address text DEFAULT ''::text NOT NULL,
    phase text DEFAULT 'Placed'::text NOT NULL,
    exit_code integer,
    reason text DEFAULT ''::text NOT NULL,
    ray_joined boolean DEFAULT false NOT NULL,
    present boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    present_since timestamp with time zone,
    attempt integer DEFAULT 1 NOT NULL
);

ALTER TABLE ONLY public.capacity_changes ALTER COLUMN id SET DEFAULT nextval('public.capacity_changes_id_seq'::regclass);

ALTER TABLE ONLY public.job_events ALTER COLUMN seq SET DEFAULT nextval('public.job_events_seq_seq'::regclass);

ALTER TABLE ONLY public.jobs ALTER COLUMN submitted_seq SET DEFAULT nextval('public.jobs_submitted_seq_seq'::regclass);

ALTER TABLE ONLY public.outbox ALTER COLUMN seq SET DEFAULT nextval('public.outbox_seq_seq'::regclass);

ALTER TABLE ONLY public.worker_logs ALTER COLUMN cursor SET DEFAULT nextval('public.worker_logs_cursor_seq'::regclass);

ALTER TABLE ONLY public.agent_epochs
    ADD CONSTRAINT agent_epochs_pkey PRIMARY KEY (consumer, cluster);

ALTER TABLE ONLY public.capacity_changes
    ADD CONSTRAINT capacity_changes_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.cluster_links
    ADD CONSTRAINT cluster_links_pkey PRIMARY KEY (a, b);

ALTER TABLE ONLY public.clusters
    ADD CONSTRAINT clusters_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (consumer, event_id);

ALTER TABLE ONLY public.job_events
    ADD CONSTRAINT job_events_pkey PRIMARY KEY (seq);

ALTER TABLE ONLY public.job_outputs
    ADD CONSTRAINT job_outputs_pkey PRIMARY KEY (job_id, worker_id);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_owner_idempotency_key UNIQUE (owner, idempotency_key);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_submitted_seq_key UNIQUE (submitted_seq);

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.network_domains
    ADD CONSTRAINT network_domains_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (cluster, name);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_event_id_key UNIQUE (event_id);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (seq);

ALTER TABLE ONLY public.platform_schema_migrations
    ADD CONSTRAINT platform_schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.project_members
    ADD CONSTRAINT project_members_pkey PRIMARY KEY (project, username);

ALTER TABLE ONLY public.projects
    ADD CONSTRAINT projects_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.secret_names
    ADD CONSTRAINT secret_names_pkey PRIMARY KEY (secret_id);

ALTER TABLE ONLY public.ssh_keys
    ADD CONSTRAINT ssh_keys_pkey PRIMARY KEY (key_id);

ALTER TABLE ONLY public.tunnel_links
    ADD CONSTRAINT tunnel_links_pkey PRIMARY KEY (domain, cluster, peer);

ALTER TABLE ONLY public.worker_logs
    ADD CONSTRAINT worker_logs_pkey PRIMARY KEY (cursor);

ALTER TABLE ONLY public.worker_logs
    ADD CONSTRAINT worker_logs_worker_id_seq_key UNIQUE (worker_id, seq);

ALTER TABLE ONLY public.worker_usage
    ADD CONSTRAINT worker_usage_pkey PRIMARY KEY (worker_id, step_s, at);

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_job_id_attempt_role_index_key UNIQUE (job_id, attempt, role, index);

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (id);

CREATE INDEX job_events_job ON public.job_events USING btree (job_id, seq);

CREATE INDEX jobs_owner_created ON public.jobs USING btree (owner, created_at DESC);

CREATE INDEX jobs_status ON public.jobs USING btree (status);

CREATE INDEX project_members_username ON public.project_members USING btree (username);

CREATE INDEX secret_names_by_owner ON public.secret_names USING btree (scope, owner, name);

CREATE INDEX ssh_keys_owner_name ON public.ssh_keys USING btree (owner, name);

CREATE INDEX worker_logs_job ON public.worker_logs USING btree (job_id, cursor);

CREATE INDEX worker_usage_job_at ON public.worker_usage USING btree (job_id, at);

CREATE INDEX worker_usage_step_at ON public.worker_usage USING btree (step_s, at);

CREATE INDEX workers_node ON public.workers USING btree (cluster, node);

ALTER TABLE ONLY public.job_events
    ADD CONSTRAINT job_events_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.job_outputs
    ADD CONSTRAINT job_outputs_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.project_members
    ADD CONSTRAINT project_members_project_fkey FOREIGN KEY (project) REFERENCES public.projects(name) ON DELETE CASCADE;

ALTER TABLE ONLY public.worker_logs
    ADD CONSTRAINT worker_logs_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id) ON DELETE CASCADE;
