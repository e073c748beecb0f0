/**
 * Which kind of bucket: checked in this order, the first full one refuses (docs/budget.md). `repeat` is the
 * loop breaker: one identity calling one tool with the same arguments (budget.repeat_limit); `server`
 * is shared by every caller of one server (budget.servers).
 */
export type BucketKind = 'repeat' | 'tool' | 'server' | 'tenant' | 'identity'

/** One bucket a request must clear, and how much the request takes from it. */
export interface BucketCharge {
  /** Unambiguous storage key from keys.ts; two different (kind, names) never share one. */
  readonly key: string
  readonly kind: BucketKind
  /** The tool, server or tenant name, or the identity, for headers and reasons. */
  readonly name: string
  readonly limit: number
  readonly windowSeconds: number
  /** Units this check needs from the bucket (a batch of three calls at cost 1 needs 3 from the identity bucket). */
  readonly cost: number
  /**
   * True: an admitted check adds `cost` to the bucket. False: the bucket is checked only (the call must
   * fit, as if it were charged) and keeps its count: a policy-denied call's shared buckets (docs/budget.md, "What a call costs").
   */
  readonly charged: boolean
}

/**
 * Which window of a bucket a count belongs to, as the store tells them apart (a refund takes back only
 * from the window it charged); null when the bucket has no open window. Opaque to everything but the store.
 */
export type WindowId = number | string | null

/**
 * A bucket as seen after the decision: the charge at the same index says which bucket, its limit and
 * window length (so a check allocates three fields per bucket, not a copy of its charge).
 */
export interface BucketState {
  /** Requests left in the current window after this decision (never negative). */
  readonly remaining: number
  /** Seconds until the bucket's current window ends (its count resets). */
  readonly resetSeconds: number
  /** The window the bucket's count is in after this decision (what `refund` takes back from). */
  readonly window: WindowId
}

/**
 * Units a replica admitted on its own (budget.on_store_error: local) while the shared store failed, in
 * a bucket's window that is still open, to be added to the shared count once the store answers.
 */
export interface LocalCount {
  readonly key: string
  readonly count: number
  readonly windowSeconds: number
}

/**
 * The units a replica admitted on its own while the shared store failed (budget/local-limiter.ts),
 * waiting to be added to the shared counts. A shared store adds them in the statement that judges the
 * next checks of their buckets, before judging those checks, so no check is judged on a shared count
 * that lacks them (a burst judged without them overshoots the limit), and the hand-over costs no
 * round trip of its own.
 */
export interface LocalHandOver {
  /**
   * Takes the units waiting for every bucket of `keys` and for up to `more` other buckets, one count per
   * bucket, or null when none waits. The units taken are in flight until `landed` or `failed`; while
   * they are, nothing more is taken (null), and the store must send no other statement.
   */
  take(keys: readonly string[], more: number): LocalCount[] | null
  /**
   * The statement that carried the units taken committed: the shared counts hold them; returns how
   * many. Also called after a statement that carried none succeeded (the store answers again: what no
   * longer waits is settled).
   */
  landed(): number
  /** It failed, or its answer never came: the units wait again (counted twice if it did commit: erring towards refusing). */
  failed(): void
  /**
   * Checks admitted locally so far. It moves while a statement is in flight when a check was judged
   * locally meanwhile: that statement's verdicts were judged without those units.
   */
  readonly localAdmissions: number
  /** Units wait or are in flight (or a local verdict is not settled yet): a store with no check to carry them sends one of its own. */
  readonly holdsCounts: boolean
}

export interface AdmitResult {
  readonly admitted: boolean
  /** One state per charge, in the order given. */
  readonly buckets: readonly BucketState[]
  /** Index into `buckets` of the first bucket that refused, or -1 when admitted. */
  readonly refusedBy: number
}

/**
 * Where bucket counts live. `admit` is all-or-nothing and atomic: either every charge is added, or
 * (when any bucket would exceed its limit) none is, and the first refusing bucket in the given
 * order is reported. Each bucket is a fixed window that opens at its first charge and ends
 * `windowSeconds` later; a charge after the end opens a new window. Concurrent calls never admit
 * more than a limit allows. `admit` rejects only on a store failure, never for a refusal.
 * The keys in one call are distinct (the budget stage sums a batch's costs per bucket), and a
 * refused call still returns every bucket's state, with the counts as they were before it.
 * test/budget/store-contract.ts holds the suite every implementation runs.
 */
export interface BudgetStore {
  /**
   * Present when the store decides in memory without waiting on anything: `admit`'s decision, returned
   * at once (it throws where `admit` would reject). The stage then calls it instead of `admit`, which
   * spares it the check_timeout_seconds deadline (a timer and a race per call) and the await (a promise
   * and a suspended frame per call).
   */
  admitNow?(charges: readonly BucketCharge[]): AdmitResult
  /**
   * `timeoutMs` is the check's bound as configured now (budget.check_timeout_seconds, which a reload
   * may change): a store that can wait gives up by then, and a check it gave up on never charges later.
   * `handOver` (on_store_error: local): what this replica admitted locally during an outage. A shared
   * store judges no check on counts without the units waiting for its buckets: it carries them in the
   * check's statement, and a verdict judged before units admitted locally since is not given (the
   * check rejects, nothing of it stays charged). A store whose counts are this process's ignores it.
   */
  admit(charges: readonly BucketCharge[], timeoutMs?: number, handOver?: LocalHandOver): Promise<AdmitResult>
  /**
   * Takes back what an admitted check charged (its `charged` buckets, `cost` each), from the windows
   * `result` names: a bucket whose window has ended since keeps its new window's count. Used when the
   * upstream never served the call. Rejects on a store failure; a store that can wait bounds it by
   * `timeoutMs`. close() waits for refunds still running.
   */
  refund(charges: readonly BucketCharge[], result: AdmitResult, timeoutMs?: number): Promise<void>
  /**
   * Shared stores only: how many replicas share the store, as the database last reported it (their
   * heartbeats), at least 1. A replica enforcing limits locally takes limit ÷ this.
   */
  liveReplicas?(): number
  /**
   * For operators (the admin API): each bucket of `selection.keys`, in that order (used 0 and no reset
   * when it has no open window), then every bucket with an open window whose key starts with one of
   * `selection.prefixes` (the repeat buckets of a caller). Reads only: counts nothing. A shared store
   * reads the shared counts, judged on its window clock. Rejects on a store failure; bounded by `timeoutMs`.
   */
  inspect?(selection: BucketSelection, timeoutMs?: number): Promise<BucketReading[]>
  /**
   * For operators: forgets the buckets `selection` names (as `inspect` finds them), so the next check
   * opens a fresh window; returns those it held, with what they had used (0 for a window already over).
   * A shared store resets them for every replica, in one statement. Rejects on a store failure.
   */
  reset?(selection: BucketSelection, timeoutMs?: number): Promise<BucketReading[]>
  close(): Promise<void>
}

/** Which buckets an operator asks about: exact storage keys, and key prefixes (keys.ts) for buckets that cannot be named one by one. */
export interface BucketSelection {
  readonly keys: readonly string[]
  readonly prefixes?: readonly string[]
}

/** A bucket as an operator sees it. */
export interface BucketReading {
  readonly key: string
  /** Units used in the open window; 0 when none is open (a window that ended reads as 0). */
  readonly used: number
  /** Seconds until the open window ends; null when none is open (the next charge opens a full one). */
  readonly resetSeconds: number | null
}
