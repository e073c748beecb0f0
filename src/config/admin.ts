import { readListenAddress, sharesListener } from './listen-address'
import { type Reader, join } from './reader'
import { readBlock, readKey } from './read-node'
import { ADMIN } from './spec'
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
  path = 'admin',
): AdminConfig | null {
  if (value === undefined || value === null) return null
  const o = readBlock(r, ADMIN, value, path)
  const at = (key: string): string => join(path, key)
  if (o.listen === undefined || o.listen === null) {
    if (o.token !== undefined && o.token !== null) {
      r.note(at('listen'), 'is required when admin.token is set (remove the admin: block to keep the admin API off)')
    }
    // No listener, nothing served (as `admin: {}`), but its shape is checked: every problem at once.
    readTls(r, o.tls, at('tls'), resolvePath, ADMIN.properties.tls)
    return null
  }
  const listen = readListenAddress(r, o.listen, at('listen'), '127.0.0.1:9090')
  let token = ''
  if (o.token === undefined || o.token === null) {
    r.note(at('token'), 'is required when admin.listen is set (e.g. token: ${WARDLINE_ADMIN_TOKEN})')
  } else {
    token = readKey(r, ADMIN, o, 'token', path, '')
    if (token !== '' && Buffer.byteLength(token, 'utf8') < MIN_ADMIN_TOKEN_BYTES) {
      r.note(at('token'), `must be at least ${MIN_ADMIN_TOKEN_BYTES} bytes (its value is not shown; openssl rand -hex 32 makes one)`)
    } else if (token !== '' && !/^[\x21-\x7e]+$/.test(token)) {
      // A bearer token travels in a header as one word: a space, a line break (an env file's trailing
      // newline) or a non-ASCII character could never be sent back equal, so every call would get 401.
      r.note(at('token'), 'must be printable ASCII without spaces or line breaks (its value is not shown; openssl rand -hex 32 makes one)')
    }
  }
  if (listen !== null && mainListen !== null && sharesListener(listen, mainListen)) {
    r.note(at('listen'), `must differ from listen (${mainListen.host}:${mainListen.port}): the admin API needs its own listener`)
  }
  // Its own block, not the main listener's: the admin API is usually on loopback or a private network,
  // where another certificate (or none) fits, and its CLI trusts the certificate this block names.
  const tls = readTls(r, o.tls, at('tls'), resolvePath, ADMIN.properties.tls)
  return listen === null ? null : { listen, token, tls }
}
