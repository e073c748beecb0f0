import type { AuditTrail } from '../audit/trail'
import type { Config } from '../config/types'
import type { Contribution } from '../feature'
import type { Logger } from '../log'
import type { TlsMaterial } from '../net/tls'
import { type AdminParts, adminRoutes } from './routes'
import { AdminServer } from './server'

/** The admin API on its own listener. */
export interface AdminFeature extends Contribution {
  readonly server: AdminServer
}

/**
 * admin.listen: the admin API's listener, or null when it is off. Opened last, once everything its
 * routes read exists. Its close is both a listener closed as shutdown begins (no budget reset or
 * revocation starts while the gateway drains) and a closer (a startup that fails after it releases it).
 */
export async function openAdmin(
  config: Config,
  parts: AdminParts,
  audit: AuditTrail,
  log: Logger,
  tls: TlsMaterial | null,
): Promise<AdminFeature | null> {
  if (config.admin === null) return null
  const server = await AdminServer.start(config.admin, config, adminRoutes(parts), audit, log, tls)
  const close = (): Promise<void> => server.close()
  return { server, closers: [close], listeners: [close] }
}
