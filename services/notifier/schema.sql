CREATE TABLE public.agent_epochs (
    consumer text NOT NULL,
    cluster text NOT NULL,
    epoch bigint NOT NULL
);

CREATE TABLE public.deliveries (
    id bigint NOT NULL,
    endpoint_id uuid NOT NULL,
    event_id text NOT NULL,
    job_id text NOT NULL,
    to_status text NOT NULL,
    notification jsonb NOT NULL,
    event_at timestamp with time zone NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    last_status_code integer,
    last_error text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT deliveries_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text])))
);

CREATE SEQUENCE public.deliveries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.deliveries_id_seq OWNED BY public.deliveries.id;

CREATE TABLE public.delivery_attempts (
    id bigint NOT NULL,
    delivery_id bigint NOT NULL,
    attempt integer NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    status_code integer,
    error text DEFAULT ''::text NOT NULL,
    duration_ms integer NOT NULL
);

CREATE SEQUENCE public.delivery_attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.delivery_attempts_id_seq OWNED BY public.delivery_attempts.id;

CREATE TABLE public.endpoints (
    id uuid NOT NULL,
    owner text NOT NULL,
    name text NOT NULL,
    kind text NOT NULL,
    url text NOT NULL,
    secret_sealed bytea,
    scope text NOT NULL,
    states text[] DEFAULT '{}'::text[] NOT NULL,
    job_ids text[] DEFAULT '{}'::text[] NOT NULL,
    language text DEFAULT 'en'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT endpoints_kind_check CHECK ((kind = ANY (ARRAY['json'::text, 'slack'::text, 'feishu'::text, 'dingtalk'::text]))),
    CONSTRAINT endpoints_scope_check CHECK ((scope = ANY (ARRAY['own'::text, 'all'::text])))
);

CREATE TABLE public.inbox (
    consumer text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.jobs (
    job_id text NOT NULL,
    owner text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL
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

ALTER TABLE ONLY public.deliveries ALTER COLUMN id SET DEFAULT nextval('public.deliveries_id_seq'::regclass);

ALTER TABLE ONLY public.delivery_attempts ALTER COLUMN id SET DEFAULT nextval('public.delivery_attempts_id_seq'::regclass);

ALTER TABLE ONLY public.outbox ALTER COLUMN seq SET DEFAULT nextval('public.outbox_seq_seq'::regclass);

ALTER TABLE ONLY public.agent_epochs
    ADD CONSTRAINT agent_epochs_pkey PRIMARY KEY (consumer, cluster);

ALTER TABLE ONLY public.deliveries
    ADD CONSTRAINT deliveries_endpoint_event UNIQUE (endpoint_id, event_id);

ALTER TABLE ONLY public.deliveries
    ADD CONSTRAINT deliveries_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.delivery_attempts
    ADD CONSTRAINT delivery_attempts_once UNIQUE (delivery_id, attempt);

ALTER TABLE ONLY public.delivery_attempts
    ADD CONSTRAINT delivery_attempts_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.endpoints
    ADD CONSTRAINT endpoints_owner_name UNIQUE (owner, name);

ALTER TABLE ONLY public.endpoints
    ADD CONSTRAINT endpoints_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (consumer, event_id);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (job_id);

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_event_id_key UNIQUE (event_id);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (seq);

ALTER TABLE ONLY public.platform_schema_migrations
    ADD CONSTRAINT platform_schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

CREATE INDEX deliveries_endpoint_recent ON public.deliveries USING btree (endpoint_id, id DESC);

CREATE INDEX deliveries_pending ON public.deliveries USING btree (endpoint_id, id) WHERE (status = 'pending'::text);

CREATE INDEX endpoints_owner ON public.endpoints USING btree (owner);

ALTER TABLE ONLY public.deliveries
    ADD CONSTRAINT deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES public.endpoints(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.delivery_attempts
    ADD CONSTRAINT delivery_attempts_delivery_id_fkey FOREIGN KEY (delivery_id) REFERENCES public.deliveries(id) ON DELETE CASCADE;
