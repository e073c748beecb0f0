import type { Reader } from './reader'

/** A listener's address as the config gives it: a host (IPv6 without brackets) and a port (0: any free port). */
export interface ListenAddress {
  readonly host: string
  readonly port: number
}

/**
 * A `host:port` listener key (admin.listen, metrics.listen), or null after noting why it is not one.
 * IPv6 hosts are written in brackets (`[::1]:9090`) and kept without them.
 */
export function readListenAddress(r: Reader, value: unknown, path: string, example: string): ListenAddress | null {
  const text = r.string(value, path, '', { nonEmpty: true })
  if (text === '') return null
  const match = /^(\[[^\]]+\]|[^:\s]+):(\d{1,5})$/.exec(text)
  if (!match || Number(match[2]) > 65535) {
    r.note(path, `must be host:port with a port between 0 and 65535 (e.g. ${example})`)
    return null
  }
  return { host: match[1].replace(/^\[|\]$/g, ''), port: Number(match[2]) }
}

const WILDCARDS = new Set(['0.0.0.0', '::', '*'])

/**
 * True when both would bind the same port on an overlapping address: equal ports (0 is a fresh port
 * each time, never a clash) on the same host, or with either on every interface.
 */
export function sharesListener(a: ListenAddress, b: ListenAddress): boolean {
  if (a.port === 0 || a.port !== b.port) return false
  return a.host.toLowerCase() === b.host.toLowerCase() || WILDCARDS.has(a.host) || WILDCARDS.has(b.host)
}
