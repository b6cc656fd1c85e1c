-- Recipients and the delivery ledger (`notify.send`, `cairn_core::recipient`, `cairn_core::delivery`).
--
-- `recipients`: one row per recipient, its JSON (checked by `Recipient::parse` before it is stored) kept as given,
--   read and written whole. Listed by id (keyset paging on the primary key).
-- `deliveries`: one row per (run, step, recipient, channel) of a step that delivers messages, so a channel
--   recorded as delivered is never sent to again for that step, whichever attempt or worker comes next.
--   `recipient_id` is '' for a worker's own development channels (a step without `to`). `attempts` counts tries
--   over every attempt of the step; `step_attempt` is the latest step attempt that reported and
--   `step_attempt_tries` the tries already counted for it (reports carry cumulative tries, so a resent report
--   counts once). No foreign key to `recipients`: the ledger outlives a deleted recipient. Deleting a run deletes
--   its ledger (`ON DELETE CASCADE`, as its steps).
CREATE TABLE recipients (
    id          TEXT PRIMARY KEY,
    body        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE deliveries (
    run_id              TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step_id             TEXT NOT NULL,
    recipient_id        TEXT NOT NULL,
    channel             TEXT NOT NULL,
    status              TEXT NOT NULL,      -- delivered | failed
    attempts            INTEGER NOT NULL,
    step_attempt        INTEGER NOT NULL,
    step_attempt_tries  INTEGER NOT NULL,
    last_error          TEXT,
    provider_message_id TEXT,
    first_attempt_at    INTEGER NOT NULL,
    last_attempt_at     INTEGER NOT NULL,
    delivered_at        INTEGER,
    PRIMARY KEY (run_id, step_id, recipient_id, channel)
);
