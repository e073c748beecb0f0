/**
 * What a stage remembers about one request for itself alone: the receipt of a budget charge, the
 * concurrency slot a request holds, the session a stream keeps alive. Each such datum has a key,
 * declared once at the top of the stage's module; the value lives on the Exchange and goes with it,
 * so nothing outlives the request and no stage keeps a map of requests of its own.
 *
 * ```ts
 * const RECEIPT = stateKey<Receipt | null>('budget.receipt', null)
 * ex.set(RECEIPT, receipt)       // typed: only a Receipt or null
 * const r = ex.get(RECEIPT)      // Receipt | null, the initial value until set
 * ```
 *
 * Only the module that declares a key reads or writes its value: what other stages or the audit
 * entry need is a plain field of the Exchange instead. Keys are numbered in declaration order and
 * the values of one request are one small array, allocated on its first `set`, so every Exchange
 * keeps one shape however many stages keep state (principles.md: the hot path does its work at load time).
 */
class StateKey<T> {
  /** Ties the key to its type both ways, so a key of one type is never accepted where another's is. */
  declare private readonly type: (value: T) => T

  constructor(
    /** The value's place in an Exchange's state array. */
    readonly index: number,
    /** For people reading a heap snapshot or a test failure: `<folder>.<what>`. */
    readonly name: string,
    /** What `get` returns before any `set`. */
    readonly initial: T,
  ) {}
}

/** Exported as a type only: stateKey() is the one way to make a key, so no two share an index. */
export type { StateKey }

/**
 * What a key's initial value may be: a value nothing can change, since every request starts from
 * the same one. A key whose values are objects starts at null.
 */
export type StateInitial = null | boolean | number | string

/** Every key's initial value, by index: an Exchange's state array starts as a copy of it. */
const initials: unknown[] = []

/**
 * Declares one datum of per-request state, once, at module level: a key made per stage instance
 * would grow every request's array at each reload.
 */
export function stateKey<T>(name: string, initial: Extract<T, StateInitial>): StateKey<T> {
  initials.push(initial)
  return new StateKey<T>(initials.length - 1, name, initial)
}

/** A fresh state array for one request, every value at its initial one (Exchange, on the first `set`). */
export function initialState(): unknown[] {
  return initials.slice()
}
