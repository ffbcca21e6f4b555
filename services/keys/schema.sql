CREATE TABLE public.agent_epochs (
    consumer text NOT NULL,
    cluster text NOT NULL,
    epoch bigint NOT NULL
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

CREATE TABLE public.secret_uses (
    id bigint NOT NULL,
    secret_id uuid NOT NULL,
    version integer NOT NULL,
    job_id text NOT NULL,
    worker_id text NOT NULL,
    cluster text NOT NULL,
    used_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE SEQUENCE public.secret_uses_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.secret_uses_id_seq OWNED BY public.secret_uses.id;

CREATE TABLE public.secrets (
    id uuid NOT NULL,
    scope text NOT NULL,
    owner text NOT NULL,
    name text NOT NULL,
    version integer NOT NULL,
    key_id text NOT NULL,
    wrapped_key bytea NOT NULL,
    key_nonce bytea NOT NULL,
    nonce bytea NOT NULL,
    ciphertext bytea NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_by text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT secrets_scope_check CHECK ((scope = ANY (ARRAY['user'::text, 'project'::text]))),
    CONSTRAINT secrets_version_check CHECK ((version >= 1))
);

CREATE TABLE public.ssh_keys (
    id uuid NOT NULL,
    owner text NOT NULL,
    name text NOT NULL,
    key_type text NOT NULL,
    bits integer NOT NULL,
    fingerprint text NOT NULL,
    comment text DEFAULT ''::text NOT NULL,
    public_key text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY public.outbox ALTER COLUMN seq SET DEFAULT nextval('public.outbox_seq_seq'::regclass);

ALTER TABLE ONLY public.secret_uses ALTER COLUMN id SET DEFAULT nextval('public.secret_uses_id_seq'::regclass);

ALTER TABLE ONLY public.agent_epochs
    ADD CONSTRAINT agent_epochs_pkey PRIMARY KEY (consumer, cluster);

ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (consumer, event_id);

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

ALTER TABLE ONLY public.secret_uses
    ADD CONSTRAINT secret_uses_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.secrets
    ADD CONSTRAINT secrets_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.secrets
    ADD CONSTRAINT secrets_scope_owner_name UNIQUE (scope, owner, name);

ALTER TABLE ONLY public.ssh_keys
    ADD CONSTRAINT ssh_keys_owner_fingerprint UNIQUE (owner, fingerprint);

ALTER TABLE ONLY public.ssh_keys
    ADD CONSTRAINT ssh_keys_owner_name UNIQUE (owner, name);

ALTER TABLE ONLY public.ssh_keys
    ADD CONSTRAINT ssh_keys_pkey PRIMARY KEY (id);

CREATE INDEX secret_uses_by_secret ON public.secret_uses USING btree (secret_id, used_at DESC);
