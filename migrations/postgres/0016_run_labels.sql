-- Finding runs (`GET /v1/runs` filters, `cairn_store::RunFilter`).
-- `goal`: the plan's goal, shown in listings; `goal_search`: the goal lower-cased (Unicode, by Cairn) for the
--   case-insensitive substring filter `q`, served by a trigram index.
-- `labels`: the run's labels as a JSON object, for reading; `run_labels` holds them one row each for filtering.
ALTER TABLE runs ADD COLUMN goal TEXT;
ALTER TABLE runs ADD COLUMN goal_search TEXT;
ALTER TABLE runs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
UPDATE runs SET goal = p.body::jsonb ->> 'goal', goal_search = lower(p.body::jsonb ->> 'goal')
    FROM plans p WHERE p.id = runs.plan_id;
-- Newest first, whatever the status: the unfiltered listing and its cursor.
CREATE INDEX runs_created_idx ON runs (created_at, id);
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX runs_goal_search_idx ON runs USING gin (goal_search gin_trgm_ops);

-- One row per label; `created_at` is the run's, so a label's runs are read newest first from the index alone.
CREATE TABLE run_labels (
    run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX run_labels_value_idx ON run_labels (key, value, created_at, run_id);

-- One row per action a run's plan uses, for the `action` filter, newest first from the index.
CREATE TABLE run_actions (
    run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    action     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, action)
);
CREATE INDEX run_actions_action_idx ON run_actions (action, created_at, run_id);
INSERT INTO run_actions (run_id, action, created_at)
    SELECT DISTINCT s.run_id, s.action, r.created_at FROM steps s JOIN runs r ON r.id = s.run_id;

-- The `attention` filter: steps that wait for an operator, found without reading the others.
CREATE INDEX steps_unknown_idx ON steps (run_id) WHERE status = 'outcome_unknown';

-- A schedule's labels, put on every run it starts.
ALTER TABLE schedules ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
