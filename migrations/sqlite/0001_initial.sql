-- Cairn schema v1 (SQLite). Times are INTEGER milliseconds since the Unix epoch (UTC); JSON is TEXT.
-- The PostgreSQL migration of the same number has the same tables, columns and indexes.

CREATE TABLE plans (
    id          TEXT PRIMARY KEY,          -- sha256 of the plan JSON as stored: plans are immutable
    body        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    plan_id          TEXT NOT NULL REFERENCES plans(id),
    status           TEXT NOT NULL,
    input            TEXT NOT NULL,
    context          TEXT NOT NULL,
    idempotency_key  TEXT UNIQUE,
    step_count       INTEGER NOT NULL,
    open_steps       INTEGER NOT NULL,     -- steps not yet final; the run finishes when it reaches 0
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    failure          TEXT,                 -- root cause when failed: {"step_id","code","message"}
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    finished_at      INTEGER
);
CREATE INDEX runs_status_created_idx ON runs (status, created_at);

CREATE TABLE steps (
    run_id               TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step_id              TEXT NOT NULL,
    position             INTEGER NOT NULL,
    action               TEXT NOT NULL,
    status               TEXT NOT NULL,
    args                 TEXT NOT NULL,
    when_expr            TEXT,
    trigger_rule         TEXT NOT NULL,
    idempotent           INTEGER NOT NULL,
    timeout_ms           INTEGER NOT NULL,
    heartbeat_timeout_ms INTEGER,
    retry                TEXT NOT NULL,
    approval             TEXT,
    dep_count            INTEGER NOT NULL,
    pending_deps         INTEGER NOT NULL,  -- dependencies not yet final; decremented in the finishing transaction
    attempt              INTEGER NOT NULL DEFAULT 0,
    available_at         INTEGER,           -- ready steps: earliest claim time (not_before timer or retry backoff)
    not_before_at        INTEGER,
    not_before_local     TEXT,              -- the timer as written, with its zone, e.g. "tomorrow 08:00 Asia/Shanghai"
    lease_id             TEXT,              -- fencing token of the current attempt
    lease_owner          TEXT,
    lease_expires_at     INTEGER,
    deadline_at          INTEGER,           -- attempt start + timeout_ms
    heartbeat_at         INTEGER,
    checkpoint           TEXT,
    output               TEXT,
    error                TEXT,              -- last failure record (JSON)
    started_at           INTEGER,
    finished_at          INTEGER,
    updated_at           INTEGER NOT NULL,
    PRIMARY KEY (run_id, step_id)
);
-- Serves the claim query: ready steps by due time.
CREATE INDEX steps_ready_idx ON steps (available_at) WHERE status = 'ready';
-- Serves the lease reaper: running steps by lease expiry.
CREATE INDEX steps_lease_idx ON steps (lease_expires_at) WHERE status = 'running';

CREATE TABLE step_edges (
    run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    parent  TEXT NOT NULL,
    child   TEXT NOT NULL,
    PRIMARY KEY (run_id, parent, child)
);
CREATE INDEX step_edges_child_idx ON step_edges (run_id, child);

CREATE TABLE attempts (
    run_id          TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step_id         TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    lease_id        TEXT NOT NULL,
    action          TEXT NOT NULL,
    worker_id       TEXT,
    status          TEXT NOT NULL,          -- running | succeeded | failed
    started_at      INTEGER NOT NULL,
    ended_at        INTEGER,
    failure_code    TEXT,
    failure_message TEXT,
    failure_details TEXT,
    retryable       INTEGER,
    retry_after_ms  INTEGER,
    suggestion      TEXT,
    degraded        INTEGER,
    PRIMARY KEY (run_id, step_id, attempt)
);

CREATE TABLE run_events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id   TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step_id  TEXT,
    kind     TEXT NOT NULL,
    data     TEXT NOT NULL,
    at       INTEGER NOT NULL
);
CREATE INDEX run_events_run_idx ON run_events (run_id, id);

CREATE TABLE workers (
    id             TEXT PRIMARY KEY,
    actions        TEXT NOT NULL,
    registered_at  INTEGER NOT NULL,
    last_seen_at   INTEGER NOT NULL
);
