-- Where each cluster's agent control link is (ADR 0028): the gateway replica holding it, as that replica's
-- own address (RLARK_REPLICA_URL), and the link's id — a random id per accepted link, so a replica
-- forgets only the row of its own link, never a newer one another replica recorded since. A replica
-- that gets a request for a cluster whose link it does not hold forwards it to the one named here.
CREATE TABLE agent_links (
    cluster     text PRIMARY KEY,
    replica_url text NOT NULL,
    link_id     text NOT NULL,
    linked_at   timestamptz NOT NULL DEFAULT now()
);
