-- The newest agent lease epoch each consumer has seen per cluster (ADR 0018). A report of an older epoch
-- comes from a deposed agent and is refused; the mark only grows, in the same transaction as the inbox claim.
CREATE TABLE agent_epochs (
    consumer text   NOT NULL,
    cluster  text   NOT NULL,
    epoch    bigint NOT NULL,
    PRIMARY KEY (consumer, cluster)
);
