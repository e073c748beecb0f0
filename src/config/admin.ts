import { readListenAddress, sharesListener } from './listen-address'
import type { Reader } from './reader'
import { readTls } from './tls'
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
 * `tls` (cert_file, key_file) serves it over HTTPS.
 */
export function readAdmin(
  r: Reader,
  value: unknown,
  mainListen: Config['listen'] | null,
  resolvePath: (p: string) => string,
): AdminConfig | null {
  if (value === undefined || value === null) return null
  const o = r.object(value, 'admin', ['listen', 'token', 'tls'])
  if (o.listen === undefined || o.listen === null) {
    if (o.token !== undefined && o.token !== null) {
      r.note('admin.listen', 'is required when admin.token is set (remove the admin: block to keep the admin API off)')
    }
    // No listener, nothing served (as `admin: {}`), but its shape is checked: every problem at once.
    readTls(r, o.tls, 'admin.tls', resolvePath, { clientCertificates: false })
    return null
  }
  const listen = readListenAddress(r, o.listen, 'admin.listen', '127.0.0.1:9090')
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
  // Its own block, not the main listener's: the admin API is usually on loopback or a private network,
  // where another certificate (or none) fits, and its CLI trusts the certificate this block names.
  const tls = readTls(r, o.tls, 'admin.tls', resolvePath, { clientCertificates: false })
  return listen === null ? null : { listen, token, tls }
}
