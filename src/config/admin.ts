import type { Reader } from './reader'
import type { AdminConfig, Config } from './types'

/**
 * The admin token's least length in bytes: 32 random bytes (256 bits), as `openssl rand -hex 32`
 * gives twice over. Shorter secrets are refused rather than warned about: the token resets budgets
 * and revokes identities.
 */
export const MIN_ADMIN_TOKEN_BYTES = 32

/**
 * The `admin:` block: `listen` (host:port) turns the admin API on; absent, there is no admin listener
 * (the default). `token` is required with it. The token's value is never part of a problem text.
 */
export function readAdmin(r: Reader, value: unknown, mainListen: Config['listen'] | null): AdminConfig | null {
  if (value === undefined || value === null) return null
  const o = r.object(value, 'admin', ['listen', 'token'])
  if (o.listen === undefined || o.listen === null) {
    if (o.token !== undefined && o.token !== null) {
      r.note('admin.listen', 'is required when admin.token is set (remove the admin: block to keep the admin API off)')
    }
    return null
  }
  const listen = readAdminListen(r, o.listen)
  let token = ''
  if (o.token === undefined || o.token === null) {
    r.note('admin.token', 'is required when admin.listen is set (e.g. token: ${WARDLINE_ADMIN_TOKEN})')
  } else {
    token = r.string(o.token, 'admin.token', '', { nonEmpty: true })
    if (token !== '' && Buffer.byteLength(token, 'utf8') < MIN_ADMIN_TOKEN_BYTES) {
      r.note('admin.token', `must be at least ${MIN_ADMIN_TOKEN_BYTES} bytes (its value is not shown; openssl rand -hex 32 makes one)`)
    } else if (token !== '' && !/^[\x21-\x7e]+$/.test(token)) {
      // A bearer token travels in a header as one word: a space, a line break (an env file's trailing
      // newline) or a non-ASCII character could never be sent back equal, so every call would get 401.
      r.note(
        'admin.token',
        'must be printable ASCII without spaces or line breaks (its value is not shown; openssl rand -hex 32 makes one)',
      )
    }
  }
  if (listen !== null && mainListen !== null && sharesListener(listen, mainListen)) {
    r.note('admin.listen', `must differ from listen (${mainListen.host}:${mainListen.port}): the admin API needs its own listener`)
  }
  return listen === null ? null : { listen, token }
}

function readAdminListen(r: Reader, value: unknown): AdminConfig['listen'] | null {
  const text = r.string(value, 'admin.listen', '', { nonEmpty: true })
  if (text === '') return null
  const match = /^(\[[^\]]+\]|[^:\s]+):(\d{1,5})$/.exec(text)
  if (!match || Number(match[2]) > 65535) {
    r.note('admin.listen', 'must be host:port with a port between 0 and 65535 (e.g. 127.0.0.1:9090)')
    return null
  }
  return { host: match[1].replace(/^\[|\]$/g, ''), port: Number(match[2]) }
}

const WILDCARDS = new Set(['0.0.0.0', '::', '*'])

/**
 * True when both would bind the same port on an overlapping address: equal ports (0 is a fresh port
 * each time, never a clash) on the same host, or with either on every interface.
 */
function sharesListener(a: AdminConfig['listen'], b: Config['listen']): boolean {
  if (a.port === 0 || a.port !== b.port) return false
  return a.host.toLowerCase() === b.host.toLowerCase() || WILDCARDS.has(a.host) || WILDCARDS.has(b.host)
}
