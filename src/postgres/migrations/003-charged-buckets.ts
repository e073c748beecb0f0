import type { Migration } from './index'

/**
 * Version 3: wardline_budget_admit tells the buckets it charges from those it only checks (p_charged,
 * right after p_costs), so a check whose buckets are not all charged is still one statement.
 *
 * Why: a call the policy denies still spends its identity's budget (a client looping on a denied tool
 * must run into its limit), but it must not eat the shared tenant and tool buckets that other callers'
 * served calls depend on. Those are checked (the call must fit: count + cost <= limit, and the first
 * bucket that does not refuses the check, in the given order, as before) but an admitted check adds
 * nothing to them and opens no window for them. Checking them in the same statement, instead of
 * leaving them out, keeps the verdict what it would be for a served call: a denied call that would not
 * have fit is refused by the same bucket, with the same headers.
 *
 * An uncharged bucket is still locked, in key order with the others, so the counts the check decides
 * on are the counts when it commits (a concurrent check cannot slip in between), and a check sharing
 * buckets with another one still queues instead of deadlocking. A bucket seen for the first time gets
 * the same already-expired placeholder row as in version 2 (the reaper removes it); its count and
 * window are untouched by the admission, so it reports count 0 and no window (window_ends NULL).
 *
 * A NULL in p_charged (or a p_charged shorter or longer than p_keys) raises, as a NULL p_now does:
 * "charged or not" has no safe default (NULL read as false would admit calls without charging them).
 *
 * Everything else is version 2's function unchanged (002-window-clock.ts, 001-initial.ts for the
 * reasons): lock order, the deadline and lock_timeout on the real database clock, the window clock
 * p_now moved on by the time spent waiting for the locks, and the returned refused_by / used /
 * reset_seconds / window_ends / db_epoch_ms.
 *
 * The version 1 and 2 functions stay beside it (an overload: this one takes one more argument, and
 * every release casts its arguments, so each release's call resolves to its own function). Replicas of
 * the previous releases keep enforcing budgets through a rolling upgrade (they charge every bucket they
 * check, as they always did), though on rows of their own: this release's keys carry the window length
 * (budget/keys.ts windowKey), so the two releases do not share counts while both run (docs/budget.md). No code of this release calls them; a later migration
 * drops them once no supported release does.
 */
export const chargedBuckets: Migration = {
  version: 3,
  name: 'budget admit charges only the buckets it is told to',
  sql: `
CREATE FUNCTION wardline_budget_admit(
  p_keys text[], p_limits integer[], p_windows double precision[], p_costs integer[], p_charged boolean[],
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
  IF coalesce(array_length(p_charged, 1), 0) <> n OR array_position(p_charged, NULL) IS NOT NULL THEN
    -- NULL read as false would admit without charging; read as true, charge shared buckets it should not.
    RAISE EXCEPTION 'wardline_budget_admit: p_charged must hold one non-NULL element per key' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF arrived >= deadline THEN
    RAISE EXCEPTION 'budget check reached the database after its deadline' USING ERRCODE = 'query_canceled';
  END IF;
  PERFORM set_config('lock_timeout', greatest(1, ceil(extract(epoch FROM deadline - arrived) * 1000))::bigint::text, true);
  IF NOT p_synchronous_commit THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;

  -- Every bucket is locked, charged or not, in key order: the check is decided on the counts it commits with.
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
      -- An uncharged bucket keeps its count and its window (none is opened for it): counts[i] and
      -- ends[i] already hold them as judged above.
      CONTINUE WHEN NOT p_charged[i];
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
