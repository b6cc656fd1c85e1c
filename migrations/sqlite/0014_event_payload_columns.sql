-- Event payloads without JSON built in SQL. The events a run records as it makes progress (`step_ready`,
-- `step_started`, `step_succeeded`, `run_succeeded`: `cairn_core::event::Progress`) keep their fields in columns
-- of their own, with `data` NULL; the JSON the API shows is made from those columns by serde when the events are
-- read. Every other event keeps its serde-built JSON text in `data`. The columns and names are PostgreSQL's, so
-- both stores hold the same rows.
--
-- SQLite cannot drop a NOT NULL constraint in place, so the table is rebuilt: rows keep their ids and `data`
-- text (and read as before), and the id sequence continues from where it was, so an id is never reused.
CREATE TABLE run_events_new (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step_id       TEXT,
    kind          TEXT NOT NULL,
    data          TEXT,
    at            INTEGER NOT NULL,
    attempt       INTEGER,
    worker_id     TEXT,
    available_at  INTEGER
);
INSERT INTO run_events_new (id, run_id, step_id, kind, data, at) SELECT id, run_id, step_id, kind, data, at FROM run_events;
INSERT INTO sqlite_sequence (name, seq) SELECT 'run_events_new', 0
    WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'run_events_new');
UPDATE sqlite_sequence SET seq = MAX(seq, COALESCE((SELECT s.seq FROM sqlite_sequence s WHERE s.name = 'run_events'), 0))
    WHERE name = 'run_events_new';
DROP TABLE run_events;
ALTER TABLE run_events_new RENAME TO run_events;
CREATE INDEX run_events_run_idx ON run_events (run_id, id);
