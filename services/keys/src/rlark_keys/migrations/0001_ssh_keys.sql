-- Users' SSH public keys. Only public material is stored: a private key is refused before any
-- write (see rlark_keys.domain). public_key is the canonical authorized_keys line (type, blob,
-- comment; never options).
CREATE TABLE ssh_keys (
    id          uuid        PRIMARY KEY,
    owner       text        NOT NULL,
    name        text        NOT NULL,
    key_type    text        NOT NULL,
    bits        integer     NOT NULL,
    fingerprint text        NOT NULL,
    comment     text        NOT NULL DEFAULT '',
    public_key  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- Names are what jobs select keys by, so one user's names are unique.
    CONSTRAINT ssh_keys_owner_name UNIQUE (owner, name),
    -- The same key twice for one user is refused (it would be injected twice).
    CONSTRAINT ssh_keys_owner_fingerprint UNIQUE (owner, fingerprint)
);
