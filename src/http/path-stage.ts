import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, INVALID_REQUEST, type Refusal, type Stage } from '../pipeline/stage'

/** Methods the MCP transports use. Anything else (PUT, PATCH, TRACE…) could carry an uninspected body. */
const FORWARDED_METHODS = new Set(['GET', 'POST', 'DELETE', 'HEAD', 'OPTIONS'])

const METHOD_NOT_ALLOWED: Refusal = {
  status: 405,
  decision: 'error',
  code: 'http.method',
  reason: 'HTTP method not forwarded',
  message: 'Method not allowed',
  headers: { allow: [...FORWARDED_METHODS].join(', ') },
}

const BAD_TARGET: Refusal = {
  status: 400,
  decision: 'error',
  code: 'http.path',
  reason: 'request target is not an origin-form path (absolute-form, authority-form or *)',
  message: 'Bad request target',
  rpcCode: INVALID_REQUEST,
}

const DOT_SEGMENT: Refusal = {
  status: 400,
  decision: 'error',
  code: 'http.path',
  reason: 'request path has a dot segment (. or ..), which could climb out of the upstream base path',
  message: 'Bad request target',
  rpcCode: INVALID_REQUEST,
}

const SEPARATOR_LOOKALIKE: Refusal = {
  status: 400,
  decision: 'error',
  code: 'http.path',
  reason:
    'request target has a backslash in its path or a fragment (#): URL parsers read them as a separator or the end of the path, so /..\\admin or /..#x could climb out of the upstream base path',
  message: 'Bad request target',
  rpcCode: INVALID_REQUEST,
}

// `.` or `..` as a whole segment, literally or percent-encoded (%2e), before any query. Segments end
// at `/` or at what some servers decode or strip into one: %2f, %5c (`\`), and `;` or %3b (path
// parameters: `/..;/admin` is `/../admin` to them).
const DOT_SEGMENT_PATTERN = /(?:^|\/|%2f|%5c)(?:\.|%2e){1,2}(?:[/;]|%2f|%5c|%3b|$)/i

/**
 * The HTTP method and path (RFC 9112's request-target; "target" in Wardline means a tool name, prompt
 * name or resource URI). Runs after authentication: only the methods MCP uses, and only origin-form
 * paths that stay inside the upstream's base path (the path is appended to it, so `/../admin` would
 * otherwise escape).
 */
export function pathStage(): Stage {
  return {
    name: 'path',
    run(ex: Exchange) {
      if (!FORWARDED_METHODS.has(ex.req.method ?? '')) return METHOD_NOT_ALLOWED
      const url = ex.req.url ?? ''
      if (url.charCodeAt(0) !== 47 /* / */) return BAD_TARGET
      // A fragment never belongs in a request target (RFC 9112 §3.2); a raw backslash is not a URL
      // character, but the WHATWG parser reads it as `/` in http(s) URLs.
      if (url.includes('#')) return SEPARATOR_LOOKALIKE
      const q = url.indexOf('?')
      const path = q < 0 ? url : url.slice(0, q)
      if (path.includes('\\')) return SEPARATOR_LOOKALIKE
      if (path.includes('.') || path.includes('%')) {
        if (DOT_SEGMENT_PATTERN.test(path)) return DOT_SEGMENT
      }
      return CONTINUE
    },
  }
}
