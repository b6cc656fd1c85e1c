-- Finding runs (`GET /v1/runs` filters, `cairn_store::RunFilter`).
-- `goal`: the plan's goal, shown in listings; `goal_search`: the goal lower-cased (Unicode, by Cairn) for the
--   case-insensitive substring filter `q`, found through the trigram full-text table `run_goals`.
-- `labels`: the run's labels as a JSON object, for reading; `run_labels` holds them one row each for filtering.
ALTER TABLE runs ADD COLUMN goal TEXT;
ALTER TABLE runs ADD COLUMN goal_search TEXT;
ALTER TABLE runs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
UPDATE runs SET goal = (SELECT json_extract(p.body, '$.goal') FROM plans p WHERE p.id = runs.plan_id);
UPDATE runs SET goal_search = lower(goal);
-- Newest first, whatever the status: the unfiltered listing and its cursor.
CREATE INDEX runs_created_idx ON runs (created_at, id);

-- The folded goals, by trigram, so `q` finds a rare substring without reading every run. It keeps its own copy
-- with the run's id (a `runs` rowid is not stable across VACUUM); a trigger fills it with each new run.
CREATE VIRTUAL TABLE run_goals USING fts5(run_id UNINDEXED, goal_search, tokenize = 'trigram');
INSERT INTO run_goals (run_id, goal_search) SELECT id, goal_search FROM runs WHERE goal_search IS NOT NULL;
CREATE TRIGGER runs_goal_insert AFTER INSERT ON runs WHEN new.goal_search IS NOT NULL BEGIN
    INSERT INTO run_goals (run_id, goal_search) VALUES (new.id, new.goal_search);
END;
CREATE TRIGGER runs_goal_delete AFTER DELETE ON runs WHEN old.goal_search IS NOT NULL BEGIN
    DELETE FROM run_goals WHERE run_id = old.id;
END;

-- One row per label; `created_at` is the run's, so a label's runs are read newest first from the index alone.
CREATE TABLE run_labels (
    run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX run_labels_value_idx ON run_labels (key, value, created_at, run_id);

-- One row per action a run's plan uses, for the `action` filter, newest first from the index.
CREATE TABLE run_actions (
    run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    action     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, action)
) WITHOUT ROWID;
CREATE INDEX run_actions_action_idx ON run_actions (action, created_at, run_id);
INSERT INTO run_actions (run_id, action, created_at)
    SELECT DISTINCT s.run_id, s.action, r.created_at FROM steps s JOIN runs r ON r.id = s.run_id;

-- The `attention` filter: steps that wait for an operator, found without reading the others.
CREATE INDEX steps_unknown_idx ON steps (run_id) WHERE status = 'outcome_unknown';

-- A schedule's labels, put on every run it starts.
ALTER TABLE schedules ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
