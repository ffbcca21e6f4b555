-- Projects, their members and GPU quotas (issue 20 item 1, ADR 0020). Admins write them; users read the
-- projects they belong to. A quota's clusters/models are {name: GPUs} objects; borrowing_limit widens each.
CREATE TABLE projects (
    name            text        PRIMARY KEY,
    description     text        NOT NULL DEFAULT '',
    gpus            integer     NOT NULL CHECK (gpus >= 0),
    clusters        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    models          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    borrowing_limit integer     NOT NULL DEFAULT 0 CHECK (borrowing_limit >= 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    updated_by      text        NOT NULL
);

CREATE TABLE project_members (
    project  text NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    username text NOT NULL,
    PRIMARY KEY (project, username)
);
CREATE INDEX project_members_username ON project_members (username);
