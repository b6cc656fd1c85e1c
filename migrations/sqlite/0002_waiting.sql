-- Cairn schema v2 (SQLite): durable waiting (issue 9): cron schedules and their ticks, approval deadlines,
-- external events and the steps waiting for them. Times are INTEGER epoch milliseconds (UTC); JSON is TEXT.
-- The PostgreSQL migration of the same number has the same tables, columns and indexes.

CREATE TABLE schedules (
    id            TEXT PRIMARY KEY,
    cron          TEXT NOT NULL,
    timezone      TEXT NOT NULL,          -- IANA name the cron is read in
    plan          TEXT NOT NULL,          -- the plan document as given; validated at creation and at each tick
    input         TEXT,                   -- run input; NULL: the plan's own input
    overlap       TEXT NOT NULL,          -- skip | allow | cancel_previous
    misfire       TEXT NOT NULL,          -- fire_once | skip | catch_up
    catch_up_max  INTEGER NOT NULL,
    paused        INTEGER NOT NULL DEFAULT 0,
    next_fire_at  INTEGER,                -- nominal instant of the next tick; NULL: never fires again
    last_fire_at  INTEGER,
    last_run_id   TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
-- Serves the tick loop: active schedules by next fire time.
CREATE INDEX schedules_due_idx ON schedules (next_fire_at) WHERE paused = 0;

-- One row per handled tick. The key is the tick's nominal UTC instant, computed once (case C18), and the row is
-- inserted in the transaction that creates the run, so a tick creates at most one run whatever the number of
-- orchestrators.
CREATE TABLE schedule_ticks (
    schedule_id  TEXT NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    fire_at      INTEGER NOT NULL,
    run_id       TEXT,                    -- NULL when no run was started
    outcome      TEXT NOT NULL,           -- started | skipped_overlap | invalid_plan
    detail       TEXT,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (schedule_id, fire_at)
);

-- Serves the approval-timeout pass and the pending-approvals listing (the deadline is kept in available_at).
CREATE INDEX steps_approval_idx ON steps (available_at) WHERE status = 'waiting_approval';

-- External events (POST /v1/events), kept so a wait that starts later still sees them within its lookback.
CREATE TABLE events_in (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    key          TEXT,
    payload      TEXT NOT NULL,
    received_at  INTEGER NOT NULL
);
CREATE INDEX events_in_name_idx ON events_in (name, received_at);

-- Steps of action `event.wait` currently waiting (the step itself is `running`, leased by the orchestrator).
CREATE TABLE event_waits (
    run_id          TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step_id         TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    name            TEXT NOT NULL,
    key             TEXT,                 -- NULL: any key matches
    filter          TEXT,                 -- CEL over `payload`
    since_at        INTEGER NOT NULL,     -- events received at or after this match (wait start - lookback_ms)
    deadline_at     INTEGER,              -- NULL: waits until an event or a cancel
    on_timeout      TEXT NOT NULL,        -- fail | skip | succeed
    timeout_output  TEXT,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (run_id, step_id)
);
CREATE INDEX event_waits_name_idx ON event_waits (name);
CREATE INDEX event_waits_deadline_idx ON event_waits (deadline_at);
