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
 * the other on the counts the earlier ones left, all or nothing each, first refusing bucket reported
 * (p_checks says which charges belong to which check; a check's charges are contiguous, checks in
 * arrival order). Everything version 3 guarantees still holds per statement:
 *  - every distinct key is locked once, in key order (COLLATE "C"), creating a missing row with the
 *    already-expired placeholder of version 2 in the same order, so statements of any replicas that
 *    share buckets queue behind each other and never deadlock;
 *  - windows are judged on the window clock (p_now moved on by the time spent on the locks), once for
 *    the whole statement;
 *  - deadlines on the real database clock, one per check (p_deadlines, absolute, or p_budgets ms after
 *    arrival when the client has no clock offset yet). The statement waits for locks until the latest
 *    of them (lock_timeout). A check whose deadline has passed when it is judged, or before the counts
 *    are written, gets no verdict (refused_by -2) and charges nothing, and the checks after it are
 *    judged again without it: the client gave up on it, so it must never charge. When every check is
 *    late on arrival the statement raises, as version 3 does.
 *  - uncharged buckets (p_charged false) are checked and left as they are;
 *  - count + cost is compared in bigint: no count (absorb may leave one at the integer ceiling) can make
 *    the statement fail, which would fail every check in it.
 *
 * Results, one row: refused_by per check (-1 admitted, -2 no verdict, else the index of the refusing
 * charge within the check), and used / reset_seconds / window_ends per charge, as version 3 returns
 * them for one check (a refused check's counts are those it was judged on). Counts are written with
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
  p_checks integer[], p_keys text[], p_limits integer[], p_windows double precision[], p_costs integer[], p_charged boolean[],
  p_deadlines double precision[], p_budgets integer[], p_synchronous_commit boolean, p_now timestamptz
) RETURNS TABLE (refused_by integer[], used integer[], reset_seconds double precision[], window_ends text[], db_epoch_ms double precision)
LANGUAGE plpgsql AS $fn$
DECLARE
  n integer := coalesce(array_length(p_keys, 1), 0);
  m integer := coalesce(array_length(p_budgets, 1), 0);
  arrived timestamptz := clock_timestamp();
  deadlines timestamptz[];
  latest timestamptz;
  ukeys text[];
  slot integer[];
  u integer;
  locked_counts integer[];
  locked_ends timestamptz[];
  ucount integer[];
  uends timestamptz[];
  udirty boolean[];
  counts integer[] := array_fill(0, ARRAY[n]);
  ends timestamptz[] := array_fill(NULL::timestamptz, ARRAY[n]);
  refused integer[];
  late boolean[] := array_fill(false, ARRAY[m]);
  starts integer[] := array_fill(0, ARRAY[m + 1]);
  now_ts timestamptz;
  judged_again boolean;
  r integer;
  i integer;
  j integer;
  k integer;
  c integer;
  e timestamptz;
BEGIN
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'wardline_budget_admit_batch: p_now must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF coalesce(array_length(p_limits, 1), 0) <> n OR coalesce(array_length(p_windows, 1), 0) <> n
     OR coalesce(array_length(p_costs, 1), 0) <> n OR coalesce(array_length(p_charged, 1), 0) <> n
     OR coalesce(array_length(p_checks, 1), 0) <> n OR coalesce(array_length(p_deadlines, 1), 0) <> m
     OR array_position(p_charged, NULL) IS NOT NULL OR array_position(p_checks, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'wardline_budget_admit_batch: one non-NULL check, limit, window, cost and charged flag per key, one deadline per check'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;

  -- Where each check's charges start (starts[j] .. starts[j + 1] - 1); checks must be numbered 1..m in order.
  j := 0;
  FOR i IN 1..n LOOP
    IF p_checks[i] <> j THEN
      IF p_checks[i] <> j + 1 THEN
        RAISE EXCEPTION 'wardline_budget_admit_batch: p_checks must number the checks 1..m in order' USING ERRCODE = 'invalid_parameter_value';
      END IF;
      j := j + 1;
      starts[j] := i;
    END IF;
  END LOOP;
  IF j <> m THEN
    RAISE EXCEPTION 'wardline_budget_admit_batch: every check needs at least one charge' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  starts[m + 1] := n + 1;

  SELECT array_agg(coalesce(to_timestamp(d.ms / 1000.0), arrived + make_interval(secs => b.ms / 1000.0)) ORDER BY d.ord)
    INTO deadlines
    FROM unnest(p_deadlines) WITH ORDINALITY AS d(ms, ord) JOIN unnest(p_budgets) WITH ORDINALITY AS b(ms, ord) USING (ord);
  SELECT max(x) INTO latest FROM unnest(deadlines) AS x;
  IF m = 0 OR arrived >= latest THEN
    RAISE EXCEPTION 'budget check reached the database after its deadline' USING ERRCODE = 'query_canceled';
  END IF;
  PERFORM set_config('lock_timeout', greatest(1, ceil(extract(epoch FROM latest - arrived) * 1000))::bigint::text, true);
  IF NOT p_synchronous_commit THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;

  -- The distinct keys in lock order, and each charge's index among them.
  SELECT array_agg(d.k ORDER BY d.k COLLATE "C") INTO ukeys FROM (SELECT DISTINCT t.k FROM unnest(p_keys) AS t(k)) d;
  u := coalesce(array_length(ukeys, 1), 0);
  SELECT array_agg(s.ord ORDER BY t.ord) INTO slot
    FROM unnest(p_keys) WITH ORDINALITY AS t(k, ord) JOIN unnest(ukeys) WITH ORDINALITY AS s(k, ord) ON s.k = t.k;

  locked_counts := array_fill(0, ARRAY[u]);
  locked_ends := array_fill(NULL::timestamptz, ARRAY[u]);
  FOR k IN 1..u LOOP
    SELECT b.count, b.ends_at INTO c, e FROM budget_buckets b WHERE b.key = ukeys[k] FOR UPDATE;
    IF NOT FOUND THEN
      -- As in version 3: one upsert, so a row the reaper deletes in between cannot be missed.
      INSERT INTO budget_buckets AS b (key, count, ends_at) VALUES (ukeys[k], 0, '-infinity')
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

  -- Judge the checks in arrival order; again without any that turned out late before the write.
  LOOP
    ucount := locked_counts;
    uends := locked_ends;
    udirty := array_fill(false, ARRAY[u]);
    refused := array_fill(-2, ARRAY[m]);
    FOR j IN 1..m LOOP
      IF NOT late[j] AND clock_timestamp() > deadlines[j] THEN
        late[j] := true;
      END IF;
      r := -1;
      IF NOT late[j] THEN
        FOR i IN starts[j]..starts[j + 1] - 1 LOOP
          -- In bigint: a count can sit at the integer ceiling (absorb adds what ran whatever the limit).
          IF ucount[slot[i]]::bigint + p_costs[i] > p_limits[i] THEN
            r := i - starts[j];
            EXIT;
          END IF;
        END LOOP;
        IF r < 0 THEN
          FOR i IN starts[j]..starts[j + 1] - 1 LOOP
            CONTINUE WHEN NOT p_charged[i];
            k := slot[i];
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
      FOR i IN starts[j]..starts[j + 1] - 1 LOOP
        counts[i] := ucount[slot[i]];
        ends[i] := uends[slot[i]];
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
    FROM unnest(ukeys, ucount, uends, udirty) AS w(k, c, e, d)
   WHERE w.d AND b.key = w.k;

  RETURN QUERY SELECT refused, counts, ARRAY(
    SELECT CASE WHEN ends[x] IS NULL THEN p_windows[x] ELSE extract(epoch FROM ends[x] - now_ts)::double precision END
      FROM generate_series(1, n) AS x ORDER BY x), ends::text[], extract(epoch FROM arrived)::double precision * 1000;
END
$fn$;
`,
}
