CREATE FUNCTION public.notify_credential_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('rlark_credentials', TG_TABLE_NAME);
    RETURN NULL;
END;
$$;

CREATE TABLE public.agent_epochs (
    consumer text NOT NULL,
    cluster text NOT NULL,
    epoch bigint NOT NULL
);

CREATE TABLE public.agent_links (
    cluster text NOT NULL,
    replica_url text NOT NULL,
    link_id text NOT NULL,
    linked_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.api_tokens (
    id text NOT NULL,
    username text NOT NULL,
    name text NOT NULL,
    token_hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    last_used_at timestamp with time zone,
    revoked_at timestamp with time zone
);

CREATE TABLE public.audit_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    actor text NOT NULL,
    role text,
    action text NOT NULL,
    target text DEFAULT ''::text NOT NULL,
    method text NOT NULL,
    path text NOT NULL,
    status integer NOT NULL,
    client_ip text,
    request_id text,
    details jsonb
);

CREATE SEQUENCE public.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.audit_log_id_seq OWNED BY public.audit_log.id;

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

CREATE TABLE public.login_failures (
    id bigint NOT NULL,
    scope text NOT NULL,
    key text NOT NULL,
    failed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT login_failures_scope_check CHECK ((scope = ANY (ARRAY['user_address'::text, 'user'::text, 'address'::text])))
);

CREATE SEQUENCE public.login_failures_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.login_failures_id_seq OWNED BY public.login_failures.id;

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

CREATE TABLE public.sessions (
    id_hash text NOT NULL,
    username text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE public.users (
    username text NOT NULL,
    role text NOT NULL,
    password_hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text,
    CONSTRAINT users_role_check CHECK ((role = ANY (ARRAY['admin'::text, 'user'::text])))
);

ALTER TABLE ONLY public.audit_log ALTER COLUMN id SET DEFAULT nextval('public.audit_log_id_seq'::regclass);

ALTER TABLE ONLY public.login_failures ALTER COLUMN id SET DEFAULT nextval('public.login_failures_id_seq'::regclass);

ALTER TABLE ONLY public.outbox ALTER COLUMN seq SET DEFAULT nextval('public.outbox_seq_seq'::regclass);

ALTER TABLE ONLY public.agent_epochs
    ADD CONSTRAINT agent_epochs_pkey PRIMARY KEY (consumer, cluster);

ALTER TABLE ONLY public.agent_links
    ADD CONSTRAINT agent_links_pkey PRIMARY KEY (cluster);

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash);

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (consumer, event_id);

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.login_failures
    ADD CONSTRAINT login_failures_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_event_id_key UNIQUE (event_id);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (seq);

ALTER TABLE ONLY public.platform_schema_migrations
    ADD CONSTRAINT platform_schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (id_hash);

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (username);

CREATE INDEX api_tokens_username ON public.api_tokens USING btree (username) WHERE (revoked_at IS NULL);

CREATE INDEX audit_log_action_at ON public.audit_log USING btree (action, at DESC);

CREATE INDEX audit_log_actor_at ON public.audit_log USING btree (actor, at DESC);

CREATE INDEX audit_log_at ON public.audit_log USING btree (at DESC);

CREATE INDEX login_failures_failed_at ON public.login_failures USING btree (failed_at);

CREATE INDEX login_failures_key ON public.login_failures USING btree (scope, key, failed_at DESC);

CREATE INDEX sessions_expires_at ON public.sessions USING btree (expires_at);

CREATE INDEX sessions_username ON public.sessions USING btree (username);

CREATE TRIGGER api_tokens_changed AFTER DELETE OR UPDATE OF username, token_hash, revoked_at ON public.api_tokens FOR EACH STATEMENT EXECUTE FUNCTION public.notify_credential_change();

CREATE TRIGGER sessions_changed AFTER DELETE OR UPDATE ON public.sessions FOR EACH STATEMENT EXECUTE FUNCTION public.notify_credential_change();

CREATE TRIGGER users_changed AFTER DELETE OR UPDATE ON public.users FOR EACH STATEMENT EXECUTE FUNCTION public.notify_credential_change();

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_username_fkey FOREIGN KEY (username) REFERENCES public.users(username) ON UPDATE CASCADE ON DELETE CASCADE;

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_username_fkey FOREIGN KEY (username) REFERENCES public.users(username) ON UPDATE CASCADE ON DELETE CASCADE;
