-- Named secrets of users and projects (ADR 0025). Only sealed values: each value under a data key of its own,
-- the data key wrapped by the operator's key-encryption key (key_id names which). Names and versions are public
-- to the owner (and published on keys.secrets); values leave only to the agent of a worker that names them.
CREATE TABLE secrets (
    id           uuid        PRIMARY KEY,
    scope        text        NOT NULL CHECK (scope IN ('user', 'project')),
    owner        text        NOT NULL,
    name         text        NOT NULL,
    version      integer     NOT NULL CHECK (version >= 1),
    key_id       text        NOT NULL,
    wrapped_key  bytea       NOT NULL,
    key_nonce    bytea       NOT NULL,
    nonce        bytea       NOT NULL,
    ciphertext   bytea       NOT NULL,
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_by   text        NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT secrets_scope_owner_name UNIQUE (scope, owner, name)
);

-- Every time a value left for a worker: which secret and version, for which worker of which job, on which
-- cluster (never the value).
CREATE TABLE secret_uses (
    id         bigserial   PRIMARY KEY,
    secret_id  uuid        NOT NULL,
    version    integer     NOT NULL,
    job_id     text        NOT NULL,
    worker_id  text        NOT NULL,
    cluster    text        NOT NULL,
    used_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX secret_uses_by_secret ON secret_uses (secret_id, used_at DESC);
