-- A caller's dedupe id for an external event (POST /v1/events `id`): an event of the same name and id is
-- delivered once, however often it is sent. The number is 0010 in both migration sets, which share numbers and
-- names from here on.
ALTER TABLE events_in ADD COLUMN dedupe_id TEXT;
CREATE UNIQUE INDEX events_in_dedupe_idx ON events_in (name, dedupe_id) WHERE dedupe_id IS NOT NULL;
