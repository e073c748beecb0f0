import type { Server } from 'node:http'
import { type AdminFeature, openAdmin } from '../admin/open'
import { openAudit, openAuditSpill } from '../audit/open'
import type { AuditTrail } from '../audit/trail'
import { openAuth } from '../auth/open'
import type { RevocationList } from '../auth/revocations'
import { openBudget } from '../budget/open'
import type { BudgetStore } from '../budget/store'
import type { Config } from '../config/types'
import { configWarnings } from '../config/warnings'
import { Contributions } from '../feature'
import { createLogger, type Logger } from '../log'
import type { Registry } from 'prom-client'
import { AuditMetrics, labelledNames } from '../audit/metrics'
import { RevocationMetrics } from '../auth/metrics'
import { BudgetMetrics } from '../budget/metrics'
import { ConcurrencyMetrics } from '../concurrency/metrics'
import { metricsRegistry } from '../metrics-registry'
import { SessionMetrics } from '../session/metrics'
import { UpstreamMetrics } from '../upstream/metrics'
import { ServerMetrics } from './metrics'
import { readTlsFiles } from '../net/tls'
import { openPostgres, postgresStorageOn } from '../postgres/open'
import { type RouteConfig, logPolicy, routesOf, sharedStages } from './chain'
import { Lifecycle, type LifecycleParts } from './lifecycle'
import { MetricsListener } from './metrics-listener'
import { Reloader } from './reload'
import { type RouteFeature, openRoute } from './route'
import { Router } from './router'
import { localRoutes } from './routes'

export interface GatewayOptions {
  readonly log?: Logger
  /** Collect Node's default process metrics (off in tests: they start timers). */
  readonly processMetrics?: boolean
  /** Budget store to use instead of the configured one (tests inject a MemoryBudgetStore with their own clock). */
  readonly budgetStore?: BudgetStore
  /** Clock session bindings idle by (tests inject one); Date.now by default. */
  readonly sessionClock?: () => number
}

export interface RunningGateway {
  /** http://host:port of the listener, https:// with tls (the real port when config asked for 0). */
  readonly url: string
  readonly server: Server
  readonly metrics: GatewayMetrics
  readonly audit: AuditTrail
  /** The revocation list requests are judged against (memory, or the shared Postgres one). */
  readonly revocations: RevocationList
  /** http(s)://host:port of the admin API's listener (admin.listen; the real port for 0), or null when it is off. */
  readonly adminUrl: string | null
  /** http://host:port of the metrics listener (metrics.listen; the real port for 0), or null when /metrics is on the main one. */
  readonly metricsUrl: string | null
  /** Graceful stop: readiness 503, stop accepting, let in-flight requests finish (bounded), flush audit, release. */
  shutdown(): Promise<void>
  /**
   * Applies a new, already validated Config's `budget`, `policy` and `tool_refusals` to requests that
   * start from now on, keeping every count already used (the store stays). Returns the YAML keys that
   * changed but only take effect after a restart; they are left as they were. Throws a ConfigError,
   * changing nothing, when `next` lacks an enforcement key the last file set (config/reload-guard.ts).
   */
  reload(next: Config): string[]
  /**
   * Re-reads the certificate and key files of every TLS listener (tls, admin.tls) at the paths the
   * gateway started with: new connections get them, open ones keep theirs. Files that fail to read,
   * parse or match keep that listener's running certificate (logged at error). `wardline serve` calls
   * it on every SIGHUP, whether or not the config file itself is valid. True when every TLS listener
   * took its new files (and when there is none).
   */
  reloadCertificates(): boolean
}

/** Each feature's metrics, all registered on one registry: the one /metrics prints. */
export interface GatewayMetrics {
  readonly registry: Registry
  readonly server: ServerMetrics
  readonly audit: AuditMetrics
  readonly budget: BudgetMetrics
  readonly concurrency: ConcurrencyMetrics
  readonly revocations: RevocationMetrics
  readonly session: SessionMetrics
  readonly upstream: UpstreamMetrics
}

export function gatewayMetrics(processMetrics: boolean): GatewayMetrics {
  const registry = metricsRegistry(processMetrics)
  return {
    registry,
    server: new ServerMetrics(registry),
    audit: new AuditMetrics(registry),
    budget: new BudgetMetrics(registry),
    concurrency: new ConcurrencyMetrics(registry),
    revocations: new RevocationMetrics(registry),
    session: new SessionMetrics(registry),
    upstream: new UpstreamMetrics(registry),
  }
}

/**
 * The composition root: turns a validated Config into a listening gateway. It only folds features
 * together: each opens itself from its own folder (`<folder>/open.ts`) and returns what it contributes
 * (closers, readiness checks, /readyz fields, reload hooks); the stage order is server/chain.ts's,
 * reloads are server/reload.ts's, and Lifecycle owns starting, draining and stopping.
 */
export async function startGateway(config: Config, options: GatewayOptions = {}): Promise<RunningGateway> {
  const log = options.log ?? createLogger(config.logLevel, { format: config.logFormat })
  const metrics = gatewayMetrics(options.processMetrics ?? false)
  const features = new Contributions()
  const trail: { audit: AuditTrail | null } = { audit: null }
  let lifecycle: Lifecycle | null = null
  let wired: Wired
  try {
    wired = await wire(config, options, log, metrics, features, trail, () => lifecycle?.draining ?? false)
  } catch (err) {
    // Whatever was opened before the failure is released here: nothing was served.
    await trail.audit?.close().catch(() => undefined)
    await features.releaseAll()
    throw err
  }
  const { parts, admin } = wired
  const started = (lifecycle = new Lifecycle(config, parts))
  let url: string
  try {
    url = await started.start()
  } catch (err) {
    await started.shutdown() // releases what was built
    throw err
  }
  return {
    url,
    server: started.server,
    metrics,
    audit: parts.audit,
    revocations: wired.revocations,
    adminUrl: admin?.server.url ?? null,
    metricsUrl: wired.metricsListener?.url ?? null,
    shutdown: () => started.shutdown(),
    reload: (next) => started.reload(next),
    reloadCertificates: () => {
      // Both, even when the first fails: each listener keeps or replaces its own.
      const main = config.tls === null || started.reloadCertificates()
      const adminTls = admin === null || (config.admin?.tls ?? null) === null || admin.server.reloadCertificates()
      return main && adminTls
    },
  }
}

/** What wire() hands to startGateway. */
interface Wired {
  readonly parts: LifecycleParts
  readonly revocations: RevocationList
  readonly admin: AdminFeature | null
  readonly metricsListener: MetricsListener | null
}

/**
 * Opens every feature the config asks for, in the order their dependencies need, and folds what each
 * contributes. Closers are released in reverse order of opening, so the order here is also the
 * shutdown order read backwards.
 */
async function wire(
  config: Config,
  options: GatewayOptions,
  log: Logger,
  metrics: GatewayMetrics,
  features: Contributions,
  trail: { audit: AuditTrail | null },
  draining: () => boolean,
): Promise<Wired> {
  // Certificates before anything opens: a missing or mismatched file stops startup naming the key and file.
  const tls = config.tls === null ? null : readTlsFiles(config.tls, 'tls')
  const adminTls = config.admin?.tls ? readTlsFiles(config.admin.tls, 'admin.tls') : null
  // Postgres first: with budget.on_store_error closed an unreachable database must stop startup before
  // anything listens; otherwise its bring-up goes on in the background (launched below). The pool is
  // the first closer, so it is released last (after the audit trail is flushed into it). The spill
  // file is checked before it: nothing is open yet if it fails.
  const spill = openAuditSpill(config, postgresStorageOn(config))
  const postgres = await openPostgres(config, log)
  if (postgres !== null) features.add(postgres)
  const audit = features.add(await openAudit(config, postgres, spill, metrics.audit, log))
  trail.audit = audit.trail
  const budget = await openBudget(config, postgres, options.budgetStore, metrics.budget, log)
  if (budget !== null) features.add(budget)
  // Before the routes (its stages follow the listener's checks) and handed to the admin listener when there is one.
  const auth = features.add(await openAuth(config, postgres, metrics.revocations, log))
  // After every Postgres user, so its closer runs before theirs: no step starts a reaper or a
  // heartbeat after its closer ran.
  if (postgres !== null) features.add(await postgres.launch())
  for (const warning of configWarnings(config)) log.warn(warning)
  // Refusals by tenant and tool are labelled with the names the config gives (reloads replace them).
  metrics.audit.nameLabels(labelledNames(config.budget, config.policy))
  const shared = sharedStages(config, { auth, audit, budget }, metrics, log, options.sessionClock)
  logPolicy(config.policy, log)
  // One route per server: the one `upstream:` (every path forwarded to it, as it always was), or a
  // router in front of the servers `servers:` names. Each probe's first run goes on while the rest is wired.
  const open = (route: RouteConfig): RouteFeature => openRoute(route, config, shared, audit.trail, metrics.upstream, log)
  const single = config.upstream === null ? null : features.add(open(routesOf(config)[0]))
  const router =
    single === null
      ? features.add(
          new Router(routesOf(config), config.defaultServer, {
            shared,
            audit: audit.trail,
            log,
            open,
            forget: (name) => metrics.upstream.forgetServer(name),
          }),
        )
      : null
  const reloader = new Reloader(config, {
    log,
    swap: (current) => {
      if (single !== null) single.reload(routesOf(current)[0])
      else router?.reload(routesOf(current), current.defaultServer)
      // Once the routes took it (a server that cannot be opened rejects the reload before this).
      logPolicy(current.policy, log)
      shared.noteTimeouts(current)
      metrics.audit.nameLabels(labelledNames(current.budget, current.policy))
    },
    onReload: (before, after) => features.onReload(before, after),
  })
  const routes = localRoutes({
    metrics: metrics.server,
    readiness: features.readiness,
    isShuttingDown: draining,
    beforeMetrics: () => audit.trail.observeQueues(),
    resourceMetadata: config.auth.resourceMetadata,
    servers: router,
    readyDetails: () => features.readyDetails(),
    metricsElsewhere: config.metrics !== null,
  })
  let metricsListener: MetricsListener | null = null
  if (config.metrics === null) {
    log.info(
      '/metrics is served on the public listener without a token; metrics.listen (e.g. 127.0.0.1:9464) moves it to a listener of its own',
    )
  } else {
    const listener = (metricsListener = await MetricsListener.start(config.metrics, config, routes, log))
    // A closer, not one of the listeners closed as shutdown begins: a scrape during the drain still
    // sees the last requests counted, and /readyz there says 503 until the end.
    features.add({ closers: [() => listener.close()] })
  }
  // Last, once everything its routes read exists: a reload changes the budget config it reports on.
  const admin = await openAdmin(
    config,
    {
      store: budget?.store ?? null,
      config: () => reloader.config.budget,
      scope: config.features.postgresStorage ? 'all replicas' : 'this replica',
      revocations: auth.revocations,
    },
    audit.trail,
    log,
    adminTls,
  )
  if (admin !== null) features.add(admin)
  await Promise.all(single !== null ? [single.firstProbe] : [...(router?.routes.values() ?? [])].map((r) => r.firstProbe))
  const parts: LifecycleParts = {
    gateway: single?.gateway ?? (router as Router),
    routes,
    audit: audit.trail,
    log,
    closers: features.closers,
    listeners: features.listeners,
    applyReload: (next) => reloader.apply(next),
    tls,
  }
  return { parts, revocations: auth.revocations, admin, metricsListener }
}
