export interface WaitOptions {
  /** What the test waits for, as the failure will name it: "timed out after 10000 ms waiting for <what>". */
  readonly what: string
  /** How long before the wait counts as a failure. 10 s is far past anything a test waits for and well inside jest's 30 s. */
  readonly timeoutMs?: number
  /** Pause between checks; make it longer when one check is costly (a database query, a new connection). */
  readonly intervalMs?: number
}

/** What a condition returns once it holds: `cond && value` gives the value, never the false. */
export type Truthy<T> = Exclude<T, false | 0 | '' | null | undefined>

/**
 * The one way a test waits for something to happen: it checks a condition an outsider can observe
 * (a log line, an audit row, a counter, a port that refuses) until it holds, instead of sleeping for a
 * guessed time. On a loaded machine the wait only takes longer; it never lets the test go on too early.
 * Resolves with the condition's first truthy value; a condition that throws fails the wait at once.
 */
export async function waitFor<T>(condition: () => T | Promise<T>, options: WaitOptions): Promise<Truthy<T>> {
  const timeoutMs = options.timeoutMs ?? 10_000
  const intervalMs = options.intervalMs ?? 10
  const deadline = performance.now() + timeoutMs
  for (;;) {
    const value = await condition()
    if (value) return value as Truthy<T>
    if (performance.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${options.what}`)
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
}
