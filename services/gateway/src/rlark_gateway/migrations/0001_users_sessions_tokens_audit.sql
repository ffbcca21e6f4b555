-- Users of the platform, their console sessions and API tokens, and the audit log of changes.
-- Secrets are never stored: passwords as argon2id hashes, session ids and API tokens as SHA-256 digests.

CREATE TABLE users (
    username      text PRIMARY KEY,
    role          text NOT NULL CHECK (role IN ('admin', 'user')),
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text
);

CREATE TABLE sessions (
    id_hash    text PRIMARY KEY,
    username   text NOT NULL REFERENCES users (username) ON DELETE CASCADE ON UPDATE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX sessions_username ON sessions (username);
CREATE INDEX sessions_expires_at ON sessions (expires_at);

CREATE TABLE api_tokens (
    id           text PRIMARY KEY,
    username     text NOT NULL REFERENCES users (username) ON DELETE CASCADE ON UPDATE CASCADE,
    name         text NOT NULL,
    token_hash   text NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_tokens_username ON api_tokens (username) WHERE revoked_at IS NULL;

CREATE TABLE audit_log (
    id         bigserial PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text NOT NULL,
    role       text,
    action     text NOT NULL,
    target     text NOT NULL DEFAULT '',
    method     text NOT NULL,
    path       text NOT NULL,
    status     integer NOT NULL,
    client_ip  text,
    request_id text
);
CREATE INDEX audit_log_at ON audit_log (at DESC);
CREATE INDEX audit_log_actor_at ON audit_log (actor, at DESC);
CREATE INDEX audit_log_action_at ON audit_log (action, at DESC);
