-- Event payloads without JSON built in SQL. The events a run records as it makes progress (`step_ready`,
-- `step_started`, `step_succeeded`, `run_succeeded`: `cairn_core::event::Progress`) keep their fields in columns
-- of their own, which SQL fills, with `data` NULL; the JSON the API shows is made from those columns by serde
-- when the events are read. Every other event keeps its serde-built JSON text in `data`.
--
-- Rows written before this migration keep their `data` text and read as before. Adding nullable columns and
-- dropping a NOT NULL constraint change only the catalog: no row is rewritten.
ALTER TABLE run_events
    ADD COLUMN attempt BIGINT,
    ADD COLUMN worker_id TEXT,
    ADD COLUMN available_at BIGINT,
    ALTER COLUMN data DROP NOT NULL;
