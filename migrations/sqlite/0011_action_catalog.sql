-- The action catalog, shared by every orchestrator of the database and kept across restarts: the spec each
-- registered action was last registered with, and which workers serve it and when each was last seen polling.
CREATE TABLE actions (
    name           TEXT PRIMARY KEY,
    spec           TEXT NOT NULL,              -- ActionSpec as JSON: schemas, effect, grounded args, example output
    registered_at  INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

CREATE TABLE action_workers (
    action         TEXT NOT NULL,
    worker_id      TEXT NOT NULL,
    last_seen_at   INTEGER NOT NULL,           -- the worker's last registration or poll for this action
    PRIMARY KEY (action, worker_id)
);
CREATE INDEX action_workers_seen_idx ON action_workers (last_seen_at);
