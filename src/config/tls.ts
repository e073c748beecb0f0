import type { Reader } from './reader'
import type { TlsConfig } from './types'

/**
 * A listener's `tls:` block (`tls`, `admin.tls`): PEM files, read by server/tls.ts at startup and on
 * every SIGHUP, never here (the key stays out of the Config, which reloads diff and log). Absent: the
 * listener speaks plain HTTP. `ca_file` (client certificates) only where `clientCertificates` allows.
 */
export function readTls(
  r: Reader,
  value: unknown,
  path: string,
  resolvePath: (p: string) => string,
  options: { readonly clientCertificates: boolean },
): TlsConfig | null {
  if (value === undefined || value === null) return null
  const keys = options.clientCertificates ? ['cert_file', 'key_file', 'ca_file'] : ['cert_file', 'key_file']
  const o = r.object(value, path, keys)
  if (typeof value !== 'object' || Array.isArray(value)) return null // noted by r.object: one problem, not three
  if (o.cert_file === undefined || o.cert_file === null) {
    r.note(`${path}.cert_file`, `is required in ${path} (the PEM certificate, its chain after it)`)
  }
  if (o.key_file === undefined || o.key_file === null) {
    r.note(`${path}.key_file`, `is required in ${path} (the PEM private key of the certificate)`)
  }
  const certFile = r.string(o.cert_file, `${path}.cert_file`, '', { nonEmpty: true })
  const keyFile = r.string(o.key_file, `${path}.key_file`, '', { nonEmpty: true })
  const caFile = options.clientCertificates ? r.optionalString(o.ca_file, `${path}.ca_file`) : null
  if (certFile === '' || keyFile === '') return null
  return { certFile: resolvePath(certFile), keyFile: resolvePath(keyFile), caFile: caFile === null ? null : resolvePath(caFile) }
}
