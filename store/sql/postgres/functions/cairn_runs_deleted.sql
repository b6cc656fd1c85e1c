-- `cairn_runs_deleted`: keeps the `ON DELETE CASCADE` of `attempts` and `run_events` to `runs` (those tables have
-- no foreign key to `runs`: each inserted row would lock its run), as the statement trigger `runs_deleted`
-- (migration 0009) that calls it. Cairn itself never deletes a run; an operator may.
CREATE OR REPLACE FUNCTION cairn_runs_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    DELETE FROM attempts a USING deleted_runs d WHERE a.run_id = d.id;
    DELETE FROM run_events e USING deleted_runs d WHERE e.run_id = d.id;
    RETURN NULL;
END;
$function$;
