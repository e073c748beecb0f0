/**
 * Percent-encoded `.`, `/` and `\`: WHATWG parsing keeps `%2f` and `%5c` as they are (and `%2e` outside
 * a whole dot segment), but a server that decodes the path before resolving it (a file server calling
 * decodeURIComponent, then path.join) turns `..%2fprivate` into `../private`.
 */
const ENCODED_SEPARATOR = /%2e|%2f|%5c/i

/**
 * Why a resource URI cannot be judged as it stands, or null when it can. The official SDK servers
 * resolve a URI with WHATWG URL parsing (`new URL(uri)`: scheme and host lower-cased, dot segments
 * and `%2e` segments removed, `\` read as `/` in special schemes, surrounding whitespace and control
 * characters stripped) and look the result up. A URI the gateway judged raw would then be a different
 * resource from the one read, so one whose parsed form differs from its raw form is refused rather
 * than guessed at: a policy rule for `file:///public/*` must never admit `file:///public/../secret`.
 */
export function resourceUriProblem(uri: string): string | null {
  if (!URL.canParse(uri)) return `resource URI ${quoted(uri)} is not an absolute URI`
  const href = new URL(uri).href
  if (href !== uri) return `resource URI ${quoted(uri)} is not in normal form (a server reads it as ${quoted(href)})`
  if (ENCODED_SEPARATOR.test(uri)) return `resource URI ${quoted(uri)} has a percent-encoded dot, slash or backslash`
  return null
}

/** A caller's string for an audit reason: JSON-quoted, and cut short (a body may hold megabytes). */
export function quoted(text: string): string {
  return JSON.stringify(text.length > 200 ? `${text.slice(0, 200)}…` : text)
}
