import type { TObject } from '@sinclair/typebox'
import { type Reader, join } from './reader'
import { readBlock, readLeaf } from './read-node'
import { keyNode, keysOf } from './spec'
import type { TlsConfig } from './types'

/**
 * A listener's `tls:` block (`tls`, `admin.tls`): PEM files, read by net/tls.ts at startup and on
 * every SIGHUP, never here (the key stays out of the Config, which reloads diff and log). Absent: the
 * listener speaks plain HTTP. `ca_file` (client certificates) only where the block's node has it
 * (spec.ts tlsBlock).
 */
export function readTls(r: Reader, value: unknown, path: string, resolvePath: (p: string) => string, node: TObject): TlsConfig | null {
  if (value === undefined || value === null) return null
  const o = readBlock(r, node, value, path)
  if (typeof value !== 'object' || Array.isArray(value)) return null // noted by r.object: one problem, not three
  if (o.cert_file === undefined || o.cert_file === null) {
    r.note(join(path, 'cert_file'), `is required in ${path} (the PEM certificate, its chain after it)`)
  }
  if (o.key_file === undefined || o.key_file === null) {
    r.note(join(path, 'key_file'), `is required in ${path} (the PEM private key of the certificate)`)
  }
  const certFile = readLeaf(r, keyNode(node, 'cert_file'), o.cert_file, join(path, 'cert_file')) as string
  const keyFile = readLeaf(r, keyNode(node, 'key_file'), o.key_file, join(path, 'key_file')) as string
  const caFile = keysOf(node).includes('ca_file')
    ? (readLeaf(r, keyNode(node, 'ca_file'), o.ca_file, join(path, 'ca_file')) as string | null)
    : null
  if (certFile === '' || keyFile === '') return null
  return { certFile: resolvePath(certFile), keyFile: resolvePath(keyFile), caFile: caFile === null ? null : resolvePath(caFile) }
}
