import type { Migration } from './index'

/**
 * Version 7: the units a replica admitted on its own during an outage (budget.on_store_error: local)
 * reach the shared counts in the same statement as the checks that come after it
 * (wardline_budget_admit_batch with p_handed and p_handed_windows), not in a statement of their own.
 *
 * Why: a hand-over in a statement of its own, sent once a first check had been answered by the
 * database again, leaves the checks judged before it lands judged on shared rows without the local
 * units, and with coalescing those are a whole burst: a tenant limited to 200 ended its window at
 * 292–302 that way. Carried by the admission statement itself, the units are in the counts
 * before the first check after the outage is judged, and the hand-over costs no round trip of its own.
 *
 * p_handed holds, per distinct key of p_keys, the units handed over for that bucket (0 for none), and
 * p_handed_windows the bucket's window length, used when no window is open there; both empty when
 * nothing is handed over (every statement but the ones that follow an outage). A key may be in
 * p_keys for its hand-over only (no charge names it): it is locked in key order with the others, so a
 * statement still never deadlocks with another. The units are added once the keys are locked and the
 * window clock read, before the first check is judged: to the open window's count (capped at the
 * integer ceiling, as the checks compare in bigint), or as the count of a window they open. They are
 * written even when every check gets no verdict (the statement still commits); when the statement
 * raises, nothing of them is written and the replica hands them over again with a later one.
 *
 * Everything else is version 4's function (004-coalesced-admission.ts): lock order, deadlines, the
 * window clock, per-check all-or-nothing verdicts in arrival order, the results. Version 4's function
 * stays beside it (an overload with two fewer arguments) for replicas of the previous release during a
 * rolling upgrade; they hand their units over with their own statement, as before.
 */
export const handOverInAdmission: Migration = {
  version: 7,
  name: 'budget checks carry the units admitted locally during an outage',
  sql: `
CREATE FUNCTION wardline_budget_admit_batch(
  p_keys text[], p_slots integer[], p_checks integer[],
  p_limits integer[], p_windows double precision[], p_costs integer[], p_charged boolean[],
  p_deadlines double precision[], p_budgets integer[], p_synchronous_commit boolean,
  p_handed integer[], p_handed_windows double precision[], p_now timestamptz
) RETURNS TABLE (refused_by integer[], used integer[], key_ends text[], key_reset double precision[], db_epoch_ms double precision)
LANGUAGE plpgsql AS $fn$
DECLARE
  u integer := coalesce(array_length(p_keys, 1), 0);
  n integer := coalesce(array_length(p_slots, 1), 0);
  m integer := coalesce(array_length(p_checks, 1), 0);
  arrived timestamptz := clock_timestamp();
  deadlines timestamptz[] := array_fill(NULL::timestamptz, ARRAY[m]);
  latest timestamptz := '-infinity';
  locked_counts integer[];
  locked_ends timestamptz[];
  ucount integer[];
  uends timestamptz[];
  udirty boolean[];
  handed boolean[];
  handing boolean := coalesce(array_length(p_handed, 1), 0) > 0;
  counts integer[] := array_fill(0, ARRAY[n]);
  refused integer[];
  late boolean[] := array_fill(false, ARRAY[m]);
  now_ts timestamptz;
  judged_again boolean;
  total integer := 0;
  s integer;
  upto integer;
  r integer;
  c integer;
  e timestamptz;
  this_key text;
  previous text;
  i integer;
  j integer;
  k integer;
BEGIN
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'wardline_budget_admit_batch: p_now must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF coalesce(array_length(p_limits, 1), 0) <> n OR coalesce(array_length(p_windows, 1), 0) <> n
     OR coalesce(array_length(p_costs, 1), 0) <> n OR coalesce(array_length(p_charged, 1), 0) <> n
     OR coalesce(array_length(p_deadlines, 1), 0) <> m OR coalesce(array_length(p_budgets, 1), 0) <> m
     OR array_position(p_charged, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'wardline_budget_admit_batch: one limit, window, cost and charged flag per charge, one deadline per check'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF handing AND (array_length(p_handed, 1) <> u OR coalesce(array_length(p_handed_windows, 1), 0) <> u
     OR array_position(p_handed, NULL) IS NOT NULL OR array_position(p_handed_windows, NULL) IS NOT NULL) THEN
    RAISE EXCEPTION 'wardline_budget_admit_batch: one handed count and window per key, or none' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF handing THEN
    FOR k IN 1..u LOOP
      IF p_handed[k] < 0 OR (p_handed[k] > 0 AND NOT p_handed_windows[k] > 0) THEN
        RAISE EXCEPTION 'wardline_budget_admit_batch: a handed count is never negative, and comes with a window'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
    END LOOP;
  END IF;
  FOR j IN 1..m LOOP
    IF p_checks[j] IS NULL OR p_checks[j] < 1 THEN
      RAISE EXCEPTION 'wardline_budget_admit_batch: every check needs at least one charge' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    total := total + p_checks[j];
    deadlines[j] := coalesce(to_timestamp(p_deadlines[j] / 1000.0), arrived + make_interval(secs => p_budgets[j] / 1000.0));
    IF deadlines[j] > latest THEN
      latest := deadlines[j];
    END IF;
  END LOOP;
  IF total <> n THEN
    RAISE EXCEPTION 'wardline_budget_admit_batch: p_checks must add up to the charges' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOR i IN 1..n LOOP
    IF p_slots[i] IS NULL OR p_slots[i] < 1 OR p_slots[i] > u THEN
      RAISE EXCEPTION 'wardline_budget_admit_batch: p_slots must index p_keys' USING ERRCODE = 'invalid_parameter_value';
    END IF;
  END LOOP;
  IF m = 0 OR arrived >= latest THEN
    RAISE EXCEPTION 'budget check reached the database after its deadline' USING ERRCODE = 'query_canceled';
  END IF;
  PERFORM set_config('lock_timeout', greatest(1, ceil(extract(epoch FROM latest - arrived) * 1000))::bigint::text, true),
          set_config('synchronous_commit', CASE WHEN p_synchronous_commit THEN current_setting('synchronous_commit') ELSE 'off' END, true);

  -- Every key locked once, in key order, as in version 3: a missing row is created (already expired,
  -- so it counts as absent) or the one a concurrent statement just created is locked, by one upsert.
  locked_counts := array_fill(0, ARRAY[u]);
  locked_ends := array_fill(NULL::timestamptz, ARRAY[u]);
  FOR k, this_key IN SELECT t.ord, t.k FROM unnest(p_keys) WITH ORDINALITY AS t(k, ord) ORDER BY t.k COLLATE "C" LOOP
    IF this_key IS NULL OR this_key = previous THEN
      RAISE EXCEPTION 'wardline_budget_admit_batch: p_keys must hold distinct keys' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    previous := this_key;
    SELECT b.count, b.ends_at INTO c, e FROM budget_buckets b WHERE b.key = previous FOR UPDATE;
    IF NOT FOUND THEN
      INSERT INTO budget_buckets AS b (key, count, ends_at) VALUES (previous, 0, '-infinity')
        ON CONFLICT (key) DO UPDATE SET count = b.count
        RETURNING b.count, b.ends_at INTO c, e;
    END IF;
    locked_counts[k] := c;
    locked_ends[k] := e;
  END LOOP;

  now_ts := p_now + (clock_timestamp() - arrived);
  FOR k IN 1..u LOOP
    IF locked_ends[k] <= now_ts THEN
      locked_counts[k] := 0;
      locked_ends[k] := NULL;
    END IF;
  END LOOP;

  -- The units admitted locally during an outage join the counts before any check is judged, whatever
  -- the limit (those calls ran): in the window open here, or in one they open.
  handed := array_fill(false, ARRAY[u]);
  FOR k IN 1..CASE WHEN handing THEN u ELSE 0 END LOOP
    CONTINUE WHEN p_handed[k] = 0;
    IF locked_ends[k] IS NULL THEN
      locked_counts[k] := p_handed[k];
      locked_ends[k] := now_ts + make_interval(secs => p_handed_windows[k]);
    ELSE
      locked_counts[k] := least(locked_counts[k]::bigint + p_handed[k], 2147483647)::integer;
    END IF;
    handed[k] := true;
  END LOOP;

  LOOP
    ucount := locked_counts;
    uends := locked_ends;
    udirty := handed;
    refused := array_fill(-2, ARRAY[m]);
    upto := 0;
    FOR j IN 1..m LOOP
      s := upto + 1;
      upto := upto + p_checks[j];
      IF NOT late[j] AND clock_timestamp() > deadlines[j] THEN
        late[j] := true;
      END IF;
      IF NOT late[j] THEN
        r := -1;
        FOR i IN s..upto LOOP
          IF ucount[p_slots[i]]::bigint + p_costs[i] > p_limits[i] THEN
            r := i - s;
            EXIT;
          END IF;
        END LOOP;
        IF r < 0 THEN
          FOR i IN s..upto LOOP
            CONTINUE WHEN NOT p_charged[i];
            k := p_slots[i];
            IF uends[k] IS NULL THEN
              ucount[k] := p_costs[i];
              uends[k] := now_ts + make_interval(secs => p_windows[i]);
            ELSE
              ucount[k] := ucount[k] + p_costs[i];
            END IF;
            udirty[k] := true;
          END LOOP;
        END IF;
        refused[j] := r;
      END IF;
      FOR i IN s..upto LOOP
        k := p_slots[i];
        counts[i] := CASE WHEN uends[k] IS NULL THEN -1 ELSE ucount[k] END;
      END LOOP;
    END LOOP;
    judged_again := false;
    FOR j IN 1..m LOOP
      IF refused[j] = -1 AND clock_timestamp() > deadlines[j] THEN
        late[j] := true;
        judged_again := true;
      END IF;
    END LOOP;
    EXIT WHEN NOT judged_again;
  END LOOP;

  UPDATE budget_buckets b SET count = w.c, ends_at = w.e
    FROM unnest(p_keys, ucount, uends, udirty) AS w(k, c, e, d)
   WHERE w.d AND b.key = w.k;

  RETURN QUERY SELECT refused, counts, uends::text[],
    ARRAY(SELECT extract(epoch FROM x - now_ts)::double precision FROM unnest(uends) WITH ORDINALITY AS t(x, ord) ORDER BY ord),
    extract(epoch FROM arrived)::double precision * 1000;
END
$fn$;
`,
}
