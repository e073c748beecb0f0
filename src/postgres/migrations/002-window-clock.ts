import type { Migration } from './index'

/**
 * Version 2: wardline_budget_admit takes the window clock as an argument (p_now) instead of a test-only
 * offset added to the database clock, so the function production runs carries no hook for tests.
 *
 * Why an argument, and why a timestamp rather than an offset: the caller chooses the clock once, when
 * it builds its SQL text. PostgresBudgetStore passes the expression clock_timestamp() (the database
 * clock, which every replica shares), so production sends no clock value and no test parameter at all;
 * a test passes a timestamptz parameter it moves forward instead of sleeping. Other designs considered:
 *  - a database setting read by the function (current_setting('wardline.…')): the function would still
 *    carry a test hook, and a setting is per session, so pooled connections would disagree;
 *  - a wardline_clock() function that tests redefine: one clock per database, shared by every store
 *    and reaper in it, and tests that rewrite the schema under the code they test.
 *
 * The argument is evaluated when the call starts, before the row locks are taken; windows must be
 * judged at the time the locks are held (a check that waited on a lock sees the window as it is now).
 * So the function judges them at p_now plus the time it then spent, measured on the database clock:
 * with p_now = clock_timestamp() that is the database clock once the locks are held, as in version 1
 * (to within the microseconds between evaluating the argument and entering the function).
 *
 * Everything else is version 1's function unchanged (see 001-initial.ts for the reasons). The deadline
 * and lock_timeout stay on the real database clock whatever the window clock says (no ghost increments),
 * and db_epoch_ms is the real database clock too, for the gateway's offset estimate.
 *
 * The version 1 function stays beside it (an overload: its last argument is double precision, the new
 * one's timestamptz, and version 1 code casts its arguments, so each release's call resolves to its own
 * function). Replicas of the previous release then keep enforcing budgets, on the same rows, through a
 * rolling upgrade instead of failing every check until they are replaced. No code of this release
 * calls it; a later migration drops it once no supported release does.
 */
export const windowClock: Migration = {
  version: 2,
  name: 'budget admit takes the window clock',
  sql: `
CREATE FUNCTION wardline_budget_admit(
  p_keys text[], p_limits integer[], p_windows double precision[], p_costs integer[],
  p_budget_ms integer, p_deadline_ms double precision, p_synchronous_commit boolean,
  p_now timestamptz
) RETURNS TABLE (refused_by integer, used integer[], reset_seconds double precision[], window_ends text[], db_epoch_ms double precision)
LANGUAGE plpgsql AS $fn$
DECLARE
  n integer := coalesce(array_length(p_keys, 1), 0);
  arrived timestamptz := clock_timestamp();
  deadline timestamptz := coalesce(to_timestamp(p_deadline_ms / 1000.0), arrived + make_interval(secs => p_budget_ms / 1000.0));
  counts integer[] := array_fill(0, ARRAY[n]);
  ends timestamptz[] := array_fill(NULL::timestamptz, ARRAY[n]);
  now_ts timestamptz;
  refused integer := -1;
  i integer;
  c integer;
  e timestamptz;
BEGIN
  IF p_now IS NULL THEN
    -- A NULL clock would compare as unknown and keep every window open forever: refuse the call.
    RAISE EXCEPTION 'wardline_budget_admit: p_now must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF arrived >= deadline THEN
    RAISE EXCEPTION 'budget check reached the database after its deadline' USING ERRCODE = 'query_canceled';
  END IF;
  PERFORM set_config('lock_timeout', greatest(1, ceil(extract(epoch FROM deadline - arrived) * 1000))::bigint::text, true);
  IF NOT p_synchronous_commit THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;

  FOR i IN SELECT t.ord FROM unnest(p_keys) WITH ORDINALITY AS t(k, ord) ORDER BY t.k COLLATE "C", t.ord LOOP
    SELECT b.count, b.ends_at INTO c, e FROM budget_buckets b WHERE b.key = p_keys[i] FOR UPDATE;
    IF NOT FOUND THEN
      -- A first sighting: create the row (already expired, so it counts as absent), or lock the one a
      -- concurrent check just created (this waits for it, still in key order). One upsert, not an
      -- insert then a select: between those two, the reaper could delete a row a refused check left
      -- behind, the select would find nothing, and the check would admit without charging.
      INSERT INTO budget_buckets AS b (key, count, ends_at) VALUES (p_keys[i], 0, '-infinity')
        ON CONFLICT (key) DO UPDATE SET count = b.count
        RETURNING b.count, b.ends_at INTO c, e;
    END IF;
    counts[i] := c;
    ends[i] := e;
  END LOOP;

  -- The window clock now that the locks are held: p_now moved on by the time spent since arrival.
  now_ts := p_now + (clock_timestamp() - arrived);
  FOR i IN 1..n LOOP
    IF ends[i] <= now_ts THEN
      counts[i] := 0;
      ends[i] := NULL;
    END IF;
    IF refused < 0 AND counts[i] + p_costs[i] > p_limits[i] THEN
      refused := i - 1;
    END IF;
  END LOOP;

  IF clock_timestamp() > deadline THEN
    RAISE EXCEPTION 'budget check passed its deadline on the database' USING ERRCODE = 'query_canceled';
  END IF;

  IF refused < 0 THEN
    FOR i IN 1..n LOOP
      UPDATE budget_buckets b
         SET count = CASE WHEN b.ends_at > now_ts THEN b.count + p_costs[i] ELSE p_costs[i] END,
             ends_at = CASE WHEN b.ends_at > now_ts THEN b.ends_at ELSE now_ts + make_interval(secs => p_windows[i]) END
       WHERE b.key = p_keys[i]
      RETURNING b.count, b.ends_at INTO c, e;
      counts[i] := c;
      ends[i] := e;
    END LOOP;
  END IF;

  RETURN QUERY SELECT refused, counts, ARRAY(
    SELECT CASE WHEN ends[j] IS NULL THEN p_windows[j] ELSE extract(epoch FROM ends[j] - now_ts)::double precision END
      FROM generate_series(1, n) AS j ORDER BY j), ends::text[], extract(epoch FROM arrived)::double precision * 1000;
END
$fn$;
`,
}
