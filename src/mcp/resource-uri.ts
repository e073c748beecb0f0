/**
 * Percent-escapes a server may decode into something else than the gateway judged. WHATWG parsing
 * keeps every escape as written, but a server that decodes the path before using it (Node's
 * fileURLToPath, a file server calling decodeURIComponent) reads `priv%61te` as `private` and
 * `..%2fprivate` as `../private`. RFC 3986 §6.2.2 gives every URI one normal spelling: unreserved
 * characters (letters, digits, `-._~`) unescaped, escapes in upper-case hex. Anything else (an escaped
 * unreserved character, `%2F`, `%5C`, lower-case hex, a `%` without two hex digits) is refused, so one
 * decoded path has one spelling the policy can name.
 */
const PERCENT = /%(?![0-9A-F]{2})|%(?:[46][1-9A-F]|[57][0-9A]|3[0-9]|2[DEF]|5[CF]|7E)/

/** The path of a URI with an authority (`scheme://host/path`), up to its query or fragment. */
const AUTHORITY_PATH = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*([^?#]*)/i

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
  if (PERCENT.test(uri))
    return `resource URI ${quoted(uri)} has a percent-escape a server could decode otherwise (an escaped letter, digit, -._~, / or \\, lower-case hex, or a lone %)`
  // `file:////private/x` is `/private/x` to a file server, but no `file:///private/*` rule names it.
  if (AUTHORITY_PATH.exec(uri)?.[1].includes('//')) return `resource URI ${quoted(uri)} has an empty path segment (//)`
  return null
}

/**
 * An RFC 6570 expression (§2.2–2.4): an optional operator, then variables with an optional prefix
 * length or explode modifier. `=,!@|` are reserved for future extensions and no SDK expands them.
 */
export const VARSPEC = '(?:[A-Za-z0-9_]|%[0-9A-F]{2})(?:\\.?(?:[A-Za-z0-9_]|%[0-9A-F]{2}))*(?::[1-9][0-9]{0,3}|\\*)?'
const EXPRESSION = new RegExp(`\\{[+#./;?&]?${VARSPEC}(?:,${VARSPEC})*\\}`, 'g')

/**
 * Why a resource URI or URI template (a completion's `ref/resource`, MCP 2025-11-25) cannot be judged
 * as it stands, or null. `new URL()` escapes the braces of `test://static/resource/{id}`, so a template
 * never equals its parsed form; its literal parts are checked instead, with each expression read as
 * a plain `x`, and the template's text stays the target. The SDK servers look a template up by that
 * exact text, and list filtering judges a listed template by it too, so one rule such as
 * `test://static/resource/*` covers the template, its completion and the URIs it expands to.
 */
export function resourceTemplateProblem(template: string): string | null {
  if (!template.includes('{') && !template.includes('}')) return resourceUriProblem(template)
  const literal = template.replace(EXPRESSION, 'x')
  if (literal.includes('{') || literal.includes('}'))
    return `resource URI template ${quoted(template)} has a brace outside an RFC 6570 expression`
  const problem = resourceUriProblem(literal)
  return problem === null ? null : `resource URI template ${quoted(template)}, with each expression read as x: ${problem}`
}

/** A caller's string for an audit reason: JSON-quoted, and cut short (a body may hold megabytes). */
export function quoted(text: string): string {
  return JSON.stringify(text.length > 200 ? `${text.slice(0, 200)}…` : text)
}
