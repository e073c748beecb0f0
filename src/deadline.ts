/**
 * Settles like `work`, or rejects with `new Error(message)` once `timeoutMs` pass first. `work` is
 * not cancelled: a caller that owns what it started (a query, a connection) stops it itself.
 * The one bound every budget check, audit write and database wait in the gateway goes through.
 */
export function withDeadline<T>(work: Promise<T>, timeoutMs: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const expired = new Promise<never>((_, reject) => {
    // A module-level callback with its arguments: no closure per call on the budget check's path.
    timer = setTimeout(expire, timeoutMs, reject, message)
  })
  return Promise.race([work, expired]).finally(() => clearTimeout(timer))
}

function expire(reject: (err: Error) => void, message: string): void {
  reject(new Error(message))
}
