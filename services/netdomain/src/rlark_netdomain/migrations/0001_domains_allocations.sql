-- Network domains. The exclusion constraint keeps domains' CIDRs disjoint even when two creates
-- race (the API checks first to name the conflict; this is the guarantee).
CREATE TABLE domains (
    name              text        PRIMARY KEY,
    cidr              cidr        NOT NULL,
    description       text        NOT NULL DEFAULT '',
    created_by        text        NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- Every assignable address below scan_from is allocated or listed in free_addresses, so the
    -- search for free addresses takes the free list first, then walks up from here. It only ever
    -- grows, under the domain's row lock (the AddressPool cursor, kept in the database).
    scan_from         inet        NOT NULL,
    -- The clusters of the last published tunnel topology, to publish only when it changes.
    topology_clusters text[]      NOT NULL DEFAULT '{}',
    CONSTRAINT domains_cidr_disjoint EXCLUDE USING gist (cidr inet_ops WITH &&)
);

-- One virtual IP per worker, stable for the job's life. The primary key makes a redelivered
-- request unable to allocate twice; the unique address keeps two workers off one IP.
CREATE TABLE allocations (
    job_id       text        NOT NULL,
    worker_id    text        NOT NULL,
    domain       text        NOT NULL REFERENCES domains (name),
    cluster      text        NOT NULL,
    address      inet        NOT NULL,
    allocated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, worker_id),
    CONSTRAINT allocations_domain_address UNIQUE (domain, address)
);
CREATE INDEX allocations_domain_cluster ON allocations (domain, cluster);

-- Addresses released below scan_from (the AddressPool released heap, kept in the database).
CREATE TABLE free_addresses (
    domain  text NOT NULL REFERENCES domains (name) ON DELETE CASCADE,
    address inet NOT NULL,
    PRIMARY KEY (domain, address)
);

-- Clusters' pod and service CIDRs, as the inventory publishes them on inventory.clusters.
-- Deleted clusters stay as tombstones so an older event replayed later cannot revive them.
CREATE TABLE clusters (
    name          text        PRIMARY KEY,
    pod_cidrs     cidr[]      NOT NULL DEFAULT '{}',
    service_cidrs cidr[]      NOT NULL DEFAULT '{}',
    deleted       boolean     NOT NULL DEFAULT false,
    observed_at   timestamptz NOT NULL
);

-- Overlaps found after the fact: a cluster registered or changed its CIDRs into a domain.
CREATE TABLE overlap_warnings (
    domain       text        NOT NULL REFERENCES domains (name) ON DELETE CASCADE,
    cluster      text        NOT NULL,
    kind         text        NOT NULL,
    cluster_cidr cidr        NOT NULL,
    message      text        NOT NULL,
    detected_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (domain, cluster, kind, cluster_cidr)
);
CREATE INDEX overlap_warnings_cluster ON overlap_warnings (cluster);
