/**
 * The allowed keys an unknown one was probably meant to be, closest first: `limts` → `limits`,
 * `windowSeconds` or `window-seconds` → `window_seconds`. Empty when none is close, so a key that is
 * simply wrong gets no guess.
 *
 * Close means: the same once case, `-` and camelCase are folded into snake_case, or within an edit
 * distance (insertions, deletions, substitutions and swaps of two neighbours: the slips of typing)
 * that grows with the key's length: 1 up to 4 characters, 2 up to 9, then 3. Every key tied at the
 * smallest distance is returned, in the order they are allowed.
 */
export function didYouMean(key: string, allowed: readonly string[]): string[] {
  const folded = fold(key)
  const exact = allowed.filter((k) => fold(k) === folded)
  if (exact.length > 0) return exact
  const limit = folded.length <= 4 ? 1 : folded.length <= 9 ? 2 : 3
  let best = limit + 1
  let found: string[] = []
  for (const candidate of allowed) {
    const d = editDistance(folded, fold(candidate), limit)
    if (d > limit) continue
    if (d < best) [best, found] = [d, [candidate]]
    else if (d === best) found.push(candidate)
  }
  return found
}

/** snake_case, lower case: `windowSeconds`, `Window-Seconds` and `window_seconds` fold alike. */
function fold(key: string): string {
  return key
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/-/g, '_')
    .toLowerCase()
}

/**
 * Optimal string alignment distance (Levenshtein plus swapping two neighbours), or `limit + 1` when it
 * exceeds `limit`. Only the band of cells within `limit` of the diagonal is computed (a cell outside
 * it is already over the limit), and the rows stop once one is wholly over it, so a key of any length
 * costs at most (2 × limit + 1) cells a character: a 100 000-character key in a file is no stall.
 */
function editDistance(a: string, b: string, limit: number): number {
  const over = limit + 1
  if (Math.abs(a.length - b.length) > limit) return over
  let before: number[] = []
  let previous = Array.from({ length: b.length + 1 }, (_, j) => Math.min(j, over))
  for (let i = 1; i <= a.length; i++) {
    const row = new Array<number>(b.length + 1).fill(over)
    row[0] = Math.min(i, over)
    let rowMin = row[0]
    for (let j = Math.max(1, i - limit); j <= Math.min(b.length, i + limit); j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let d = Math.min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, before[j - 2] + 1)
      row[j] = Math.min(d, over)
      rowMin = Math.min(rowMin, row[j])
    }
    if (rowMin >= over) return over
    before = previous
    previous = row
  }
  return previous[b.length]
}
