CREATE TABLE public.agent_epochs (
    consumer text NOT NULL,
    cluster text NOT NULL,
    epoch bigint NOT NULL
);

CREATE TABLE public.allocations (
    job_id text NOT NULL,
    worker_id text NOT NULL,
    domain text NOT NULL,
    cluster text NOT NULL,
    address inet NOT NULL,
    allocated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.clusters (
    name text NOT NULL,
    pod_cidrs cidr[] DEFAULT '{}'::cidr[] NOT NULL,
    service_cidrs cidr[] DEFAULT '{}'::cidr[] NOT NULL,
    deleted boolean DEFAULT false NOT NULL,
    observed_at timestamp with time zone NOT NULL,
    observed_pod_cidrs cidr[] DEFAULT '{}'::cidr[] NOT NULL,
    observed_service_cidrs cidr[] DEFAULT '{}'::cidr[] NOT NULL,
    networks_observed_at timestamp with time zone
);

CREATE TABLE public.domains (
    name text NOT NULL,
    cidr cidr NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    scan_from inet NOT NULL,
    topology_clusters text[] DEFAULT '{}'::text[] NOT NULL
);

CREATE TABLE public.free_addresses (
    domain text NOT NULL,
    address inet NOT NULL
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

CREATE TABLE public.overlap_warnings (
    domain text NOT NULL,
    cluster text NOT NULL,
    kind text NOT NULL,
    cluster_cidr cidr NOT NULL,
    message text NOT NULL,
    detected_at timestamp with time zone DEFAULT now() NOT NULL
);

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

CREATE TABLE public.tunnel_endpoints (
    domain text NOT NULL,
    cluster text NOT NULL,
    host text NOT NULL,
    port integer NOT NULL,
    public_key text NOT NULL,
    announced_at timestamp with time zone NOT NULL,
    CONSTRAINT tunnel_endpoints_port_check CHECK (((port >= 1) AND (port <= 65535)))
);

CREATE TABLE public.tunnel_relays (
    domain text NOT NULL,
    a text NOT NULL,
    b text NOT NULL,
    via text NOT NULL,
    since timestamp with time zone NOT NULL,
    CONSTRAINT tunnel_relays_check CHECK (((a < b) AND (via <> a) AND (via <> b)))
);

CREATE TABLE public.tunnel_states (
    domain text NOT NULL,
    cluster text NOT NULL,
    peer text NOT NULL,
    state text NOT NULL,
    since timestamp with time zone NOT NULL,
    rtt_ms double precision,
    bytes_sent bigint DEFAULT 0 NOT NULL,
    bytes_received bigint DEFAULT 0 NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    reported_at timestamp with time zone NOT NULL
);

ALTER TABLE ONLY public.outbox ALTER COLUMN seq SET DEFAULT nextval('public.outbox_seq_seq'::regclass);

ALTER TABLE ONLY public.agent_epochs
    ADD CONSTRAINT agent_epochs_pkey PRIMARY KEY (consumer, cluster);

ALTER TABLE ONLY public.allocations
    ADD CONSTRAINT allocations_domain_address UNIQUE (domain, address);

ALTER TABLE ONLY public.allocations
    ADD CONSTRAINT allocations_pkey PRIMARY KEY (job_id, worker_id);

ALTER TABLE ONLY public.clusters
    ADD CONSTRAINT clusters_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.domains
    ADD CONSTRAINT domains_cidr_disjoint EXCLUDE USING gist (cidr inet_ops WITH &&);

ALTER TABLE ONLY public.domains
    ADD CONSTRAINT domains_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.free_addresses
    ADD CONSTRAINT free_addresses_pkey PRIMARY KEY (domain, address);

ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (consumer, event_id);

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_event_id_key UNIQUE (event_id);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (seq);

ALTER TABLE ONLY public.overlap_warnings
    ADD CONSTRAINT overlap_warnings_pkey PRIMARY KEY (domain, cluster, kind, cluster_cidr);

ALTER TABLE ONLY public.platform_schema_migrations
    ADD CONSTRAINT platform_schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.tunnel_endpoints
    ADD CONSTRAINT tunnel_endpoints_pkey PRIMARY KEY (domain, cluster);

ALTER TABLE ONLY public.tunnel_relays
    ADD CONSTRAINT tunnel_relays_pkey PRIMARY KEY (domain, a, b);

ALTER TABLE ONLY public.tunnel_states
    ADD CONSTRAINT tunnel_states_pkey PRIMARY KEY (domain, cluster, peer);

CREATE INDEX allocations_domain_cluster ON public.allocations USING btree (domain, cluster);

CREATE INDEX overlap_warnings_cluster ON public.overlap_warnings USING btree (cluster);

ALTER TABLE ONLY public.allocations
    ADD CONSTRAINT allocations_domain_fkey FOREIGN KEY (domain) REFERENCES public.domains(name);

ALTER TABLE ONLY public.free_addresses
    ADD CONSTRAINT free_addresses_domain_fkey FOREIGN KEY (domain) REFERENCES public.domains(name) ON DELETE CASCADE;

ALTER TABLE ONLY public.overlap_warnings
    ADD CONSTRAINT overlap_warnings_domain_fkey FOREIGN KEY (domain) REFERENCES public.domains(name) ON DELETE CASCADE;

ALTER TABLE ONLY public.tunnel_endpoints
    ADD CONSTRAINT tunnel_endpoints_domain_fkey FOREIGN KEY (domain) REFERENCES public.domains(name) ON DELETE CASCADE;

ALTER TABLE ONLY public.tunnel_relays
    ADD CONSTRAINT tunnel_relays_domain_fkey FOREIGN KEY (domain) REFERENCES public.domains(name) ON DELETE CASCADE;

ALTER TABLE ONLY public.tunnel_states
    ADD CONSTRAINT tunnel_states_domain_fkey FOREIGN KEY (domain) REFERENCES public.domains(name) ON DELETE CASCADE;
