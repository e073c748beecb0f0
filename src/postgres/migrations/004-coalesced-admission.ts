import type { Migration } from './index'

/**
 * Version 4: many budget checks in one statement (wardline_budget_admit_batch), and the table every
 * replica heartbeats into (wardline_replicas).
 *
 * Why a batch: a check is one round trip and one commit, and a hot bucket's row lock is held from the
 * check's lock to its commit, so checks of one hot identity ran one commit at a time, and a spike of
 * checks queued for the pool's few connections until they timed out and failed open. The store now
 * gathers the checks that arrive while a statement is in flight and sends them together
 * (budget/postgres-store.ts): one round trip, one commit, each row locked once, for all of them.
 *
 * Each check keeps the verdict it would get alone, in arrival order: the checks are judged one after
 * the other on the counts the earlier ones left, all or nothing each, first refusing bucket reported.
 * The batch is sent compactly: p_keys holds each distinct bucket key once, and each charge names its
 * key by position (p_slots, 1-based); p_checks holds how many charges each check has (a check's charges
 * are contiguous, checks in arrival order); limits, windows, costs and charged flags are per charge.
 * Everything version 3 guarantees still holds per statement:
 *  - every distinct key is locked once, in key order (COLLATE "C"), creating a missing row with the
 *    already-expired placeholder of version 2 in the same order, so statements of any replicas that
 *    share buckets queue behind each other and never deadlock (a key given twice is refused);
 *  - windows are judged on the window clock (p_now moved on by the time spent on the locks), once for
 *    the whole statement;
 *  - deadlines on the real database clock, one per check (p_deadlines, absolute, or p_budgets ms after
 *    arrival when the client has no clock offset yet). The statement waits for locks until the latest
 *    of them (lock_timeout). A check whose deadline has passed when it is judged, or before the counts
 *    are written, gets no verdict (refused_by -2) and charges nothing, and the checks after it are
 *    judged again without it: the client gave up on it, so it must never charge. When every check is
 *    late on arrival the statement raises, as version 3 does;
 *  - uncharged buckets (p_charged false) are checked and left as they are;
 *  - count + cost is compared in bigint: no count (absorb may leave one at the integer ceiling) can make
 *    the statement fail, which would fail every check in it.
 *
 * Results, one row: refused_by per check (-1 admitted, -2 no verdict, else the index of the refusing
 * charge within the check); used per charge, the bucket's count after that check (a refused check: the
 * count it was judged on), or -1 while the bucket has no open window; and per key, its window's end
 * (key_ends, text: the window id a refund names) and the seconds left in it (key_reset), NULL for a key
 * with no open window. A key's window cannot change within a statement once open (all checks share the
 * statement's clock), so a charge whose used is not -1 is in its key's window. Counts are written with
 * one UPDATE for all the buckets the statement charged.
 *
 * wardline_replicas: one row per running replica, its heartbeat on the database clock. Replicas that
 * enforce limits locally while the store fails divide each limit by the number of replicas whose
 * heartbeat is recent (budget.on_store_error: local).
 *
 * Versions 1 to 3 of wardline_budget_admit stay (replicas of earlier releases keep working through a
 * rolling upgrade; this release calls only the batch function).
 */
export const coalescedAdmission: Migration = {
  version: 4,
  name: 'budget checks in batches; replica heartbeats',
  sql: `
CREATE TABLE wardline_replicas (
  replica_id text PRIMARY KEY,
  heartbeat_at timestamptz NOT NULL,
  started_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION wardline_budget_admit_batch(
  p_keys text[], p_slots integer[], p_checks integer[],
  p_limits integer[], p_windows double precision[], p_costs integer[], p_charged boolean[],
  p_deadlines double precision[], p_budgets integer[], p_synchronous_commit boolean, p_now timestamptz
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

  LOOP
    ucount := locked_counts;
    uends := locked_ends;
    udirty := array_fill(false, ARRAY[u]);
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
