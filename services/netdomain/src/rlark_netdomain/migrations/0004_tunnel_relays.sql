-- The pairs of a domain's clusters that talk through a relay cluster (domain/relays.py), as the
-- netdomain service last decided and published them in the domain's tunnel topology. since: when the
-- pair was first relayed (it tries the direct link again RLARK_NETDOMAIN_RELAY_RETRY_S after that).
CREATE TABLE tunnel_relays (
    domain text        NOT NULL REFERENCES domains (name) ON DELETE CASCADE,
    a      text        NOT NULL,
    b      text        NOT NULL,
    via    text        NOT NULL,
    since  timestamptz NOT NULL,
    PRIMARY KEY (domain, a, b),
    CHECK (a < b AND via <> a AND via <> b)
);
