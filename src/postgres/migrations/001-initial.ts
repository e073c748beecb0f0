import type { Migration } from './index'

/**
 * Version 1: the budget buckets with their one-round-trip check, and the audit trail.
 *
 * budget_buckets holds one row per bucket key while its window is open (and a little after, until the
 * reaper passes). fillfactor 70 leaves room on each page so the common update (count only, no indexed
 * column touched) is a HOT update: no index write, no bloat on the hot-key path.
 *
 * wardline_budget_admit is the whole check in one statement (docs/principles.md: at most one
 * Postgres round trip per budget check, all tiers together):
 *  - rows are locked in key order, whatever order the tiers are checked in, so two checks sharing
 *    buckets queue behind each other instead of deadlocking;
 *  - windows are judged against the database clock, read once after the locks are held, so replicas
 *    with skewed clocks agree and a check that waited for a lock sees the window as it is now;
 *  - p_deadline_ms bounds the check on the server: the gateway's own deadline, translated to the
 *    database clock (epoch ms; NULL before the gateway has measured the clock offset, and then
 *    arrival + p_budget_ms). A check that arrives late raises before taking any lock, lock waits end
 *    there (lock_timeout), and a check that finishes past it raises instead of committing, so a check
 *    the gateway already gave up on (and answered "failed open") never charges a bucket later, even
 *    when the network delivered it late (no ghost increments);
 *  - window_ends lets the gateway refund an admitted check whose verdict reached it only after it
 *    stopped waiting (see PostgresBudgetStore): the refund touches that window only, never a later one;
 *  - all-or-nothing: nothing is charged unless every bucket has room; the first full one (in the
 *    given order) is reported, as in MemoryBudgetStore.
 * p_clock_offset_seconds is 0 in production; tests move the window clock with it instead of sleeping.
 */
export const initial: Migration = {
  version: 1,
  name: 'budget buckets, audit entries',
  sql: `
CREATE TABLE budget_buckets (
  key text PRIMARY KEY,
  count integer NOT NULL,
  ends_at timestamptz NOT NULL
) WITH (fillfactor = 70);
CREATE INDEX budget_buckets_ends_at ON budget_buckets (ends_at);

CREATE FUNCTION wardline_budget_admit(
  p_keys text[], p_limits integer[], p_windows double precision[], p_costs integer[],
  p_budget_ms integer, p_deadline_ms double precision, p_synchronous_commit boolean,
  p_clock_offset_seconds double precision
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

  now_ts := clock_timestamp() + make_interval(secs => p_clock_offset_seconds);
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

CREATE TABLE audit_entries (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  request_id text NOT NULL UNIQUE,
  "timestamp" timestamptz NOT NULL,
  identity text NOT NULL,
  tenant text NOT NULL,
  method text NOT NULL,
  tool text NOT NULL,
  decision text NOT NULL,
  status integer NOT NULL,
  latency_ms double precision NOT NULL,
  reason text,
  session_id text,
  recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_entries_timestamp ON audit_entries ("timestamp");
`,
}
