-- The keys service's named secrets as the scheduler needs them (ADR 0025): which names each user and project
-- has, to check that a job names only secrets its owner may use. Names and versions only: never a value.
CREATE TABLE secret_names (
    secret_id  text    PRIMARY KEY,
    scope      text    NOT NULL CHECK (scope IN ('user', 'project')),
    owner      text    NOT NULL,
    name       text    NOT NULL,
    version    integer NOT NULL
);
CREATE INDEX secret_names_by_owner ON secret_names (scope, owner, name);
