import type { AddressInfo, Server } from 'node:net'
import { whereToChange } from '../config/origin'
import { WardlineError } from '../errors'

/** Why a bind failed, in the words an operator acts on, by the listen error's code. */
const WHY: Readonly<Record<string, string>> = {
  EADDRINUSE: 'is already in use (another process listens there)',
  EACCES: 'is not allowed (ports below 1024 need root or CAP_NET_BIND_SERVICE)',
  EADDRNOTAVAIL: 'is not an address of this host',
  ENOTFOUND: 'names a host that does not resolve',
  EAI_AGAIN: 'names a host that does not resolve (the resolver did not answer)',
}

/**
 * Binds `server` to host:port, or throws a WL_LISTEN_FAILED error that names the config key to change
 * and, when the key's value came from `${VAR}`, the variable (editing the file does nothing while the
 * variable is set):
 *
 *   listen 127.0.0.1:8080 is already in use (another process listens there): change listen in
 *   wardline.yaml (the file reads it from WARDLINE_LISTEN: set that variable or edit the key)
 *
 * `config` is the loaded Config whose `key` this is (its origin knows the file and the variables); any
 * listener of the gateway uses this (the main one: `listen`; the admin API: `admin.listen`).
 */
export async function listenOrExplain(
  server: Server,
  address: { readonly host: string; readonly port: number },
  key: string,
  config: object,
): Promise<void> {
  await bindOrExplain(server, address, key, whereToChange(config, key))
}

/**
 * listenOrExplain for a listener whose address is not a config key (the example MCP server run on its
 * own: `--port`): the failure reads `${what} host:port ${why}: ${change}`.
 */
export async function bindOrExplain(
  server: Server,
  address: { readonly host: string; readonly port: number },
  what: string,
  change: string,
): Promise<void> {
  const { host, port } = address
  await new Promise<void>((resolve, reject) => {
    const failed = (err: NodeJS.ErrnoException): void => {
      const shown = `${host.includes(':') ? `[${host}]` : host}:${port}`
      const why = (err.code !== undefined ? WHY[err.code] : undefined) ?? `cannot be listened on (${err.code ?? err.message})`
      reject(new WardlineError('WL_LISTEN_FAILED', `${what} ${shown} ${why}: ${change}`, { cause: err }))
    }
    server.once('error', failed)
    server.listen(port, host, () => {
      server.off('error', failed)
      resolve()
    })
  })
}

/**
 * `host:port` a listening server is bound to (the real port when it asked for 0), IPv6 in brackets: what
 * every listener's startup line and URL show.
 */
export function boundAddress(server: Server): string {
  const a = server.address() as AddressInfo
  return `${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`
}
