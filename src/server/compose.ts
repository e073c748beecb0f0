import { createServer, type Server } from 'node:http'
import type { Pool } from 'pg'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { JsonlAuditSink } from '../audit/jsonl-sink'
import { auditReservationStage } from '../audit/reservation-stage'
import { AuditTrail } from '../audit/trail'
import { PostgresAuditSink } from '../audit/postgres-sink'
import { AuditSpill } from '../audit/spill'
import { AuditWriter } from '../audit/writer'
import { HeaderAuthenticator } from '../auth/header-authenticator'
import { JwtAuthenticator } from '../auth/jwt-authenticator'
import { type Authenticator, authStage } from '../auth/stage'
import { FailOpenWindow } from '../budget/fail-open-window'
import { MemoryBudgetStore } from '../budget/memory-store'
import { PostgresBudgetStore } from '../budget/postgres-store'
import { type BudgetStage, budgetStage } from '../budget/stage'
import type { BudgetStore } from '../budget/store'
import { ConcurrencyLimiter } from '../concurrency/limiter'
import { concurrencyStage } from '../concurrency/stage'
import { keysNeedingRestart } from '../config/restart-keys'
import { withDeadline } from '../deadline'
import { describeError } from '../errors'
import type { Config } from '../config/types'
import { pathStage } from '../http/path-stage'
import { httpStage } from '../http/stage'
import { jsonRpcStage } from '../jsonrpc/stage'
import { createLogger, type Logger, RateLimitedLog } from '../log'
import { Metrics } from '../metrics'
import type { ReadinessCheck } from '../readiness'
import type { Stage } from '../pipeline/stage'
import { compilePolicy } from '../policy/compile'
import { policyStage } from '../policy/stage'
import { migrate } from '../postgres/migrate'
import { checkReachable, openPool } from '../postgres/pool'
import { postgresReadiness } from '../postgres/readiness'
import { BudgetReaper } from '../postgres/reaper'
import { Upstream } from '../upstream/forward'
import { Gateway } from './gateway'
import { localRoutes } from './routes'

export interface GatewayOptions {
  readonly log?: Logger
  /** Collect Node's default process metrics (off in tests: they start timers). */
  readonly processMetrics?: boolean
  /** Budget store to use instead of the configured one (tests inject a MemoryBudgetStore with their own clock). */
  readonly budgetStore?: BudgetStore
}

export interface RunningGateway {
  /** http://host:port of the listener (the real port when config asked for 0). */
  readonly url: string
  readonly server: Server
  readonly metrics: Metrics
  readonly audit: AuditTrail
  /** Graceful stop: readiness 503, stop accepting, let in-flight requests finish (bounded), flush audit, release. */
  shutdown(): Promise<void>
  /**
   * Applies a new, already validated Config's `budget` and `policy` to requests that start from now on,
   * keeping every count already used (the store stays). Returns the YAML keys that changed but only
   * take effect after a restart; they are left as they were.
   */
  reload(next: Config): string[]
}

/** The composition root: turns a validated Config into a listening gateway. */
export async function startGateway(config: Config, options: GatewayOptions = {}): Promise<RunningGateway> {
  const log = options.log ?? createLogger(config.logLevel)
  const metrics = new Metrics(options.processMetrics ?? false)
  /** Released in reverse order of acquisition at shutdown, after the audit trail is flushed. */
  const closers: Array<() => Promise<void> | void> = []
  const readiness: ReadinessCheck[] = []

  // Postgres first: an unreachable database must stop startup before anything listens. The pool is
  // the first closer, so it is released last (after the audit trail is flushed into it). The spill
  // file is checked before it: nothing is open yet if it fails.
  const postgresOn = config.features.postgresStorage && config.postgres !== null
  const spill = postgresOn ? AuditSpill.open(config.audit.spillFile) : null
  const pool = postgresOn ? await openPostgres(config, log, closers) : null

  const writers: AuditWriter[] = []
  const queueing = {
    maxQueueEntries: config.audit.maxQueueEntries,
    onDropped: (n: number, name: string) => metrics.auditDropped.labels(name).inc(n),
  }
  if (config.audit.output !== null) {
    writers.push(new AuditWriter(await JsonlAuditSink.open(config.audit.output), log, queueing))
  }
  if (pool !== null && spill !== null) {
    const pgWriter = new AuditWriter(new PostgresAuditSink(pool), log, {
      ...queueing,
      spill,
      onSpilled: (n, name) => metrics.auditSpilled.labels(name).inc(n),
      onRejected: (n, name) => metrics.auditRejected.labels(name).inc(n),
    })
    writers.push(pgWriter)
    readiness.push(postgresReadiness(pool, { auditSpillPending: () => pgWriter.hasSpilled }))
  }
  const audit = new AuditTrail(writers, metrics, log)

  const authenticator = await openAuthenticator(config, log)
  const upstream = new Upstream(config.upstream, config.http.trustedProxies)
  const store = await openBudgetStore(config, pool, options.budgetStore, log, closers)
  // One limiter for the process: built before `leading`, which every reload reuses, so the counts of
  // requests in flight survive a reload (max_concurrent_per_identity itself is a restart key).
  const concurrency = new ConcurrencyLimiter(config.limits.maxConcurrentPerIdentity)
  // Host and Origin first: a DNS-rebinding page gets nothing, not even a 401 challenge.
  const leading = [
    httpStage(config.http),
    authStage(authenticator, config.auth),
    pathStage(),
    jsonRpcStage(config.limits),
    // After parsing, so an `initialize` is never refused; before anything is charged or reserved.
    concurrencyStage(concurrency, metrics),
    auditReservationStage(audit),
  ]
  let budget: BudgetStage | null = null
  const budgetFailures = { failOpens: new FailOpenWindow(Date.now), warnings: new RateLimitedLog(log) }
  const stagesFor = (cfg: Config): Stage[] => {
    budget = store === null ? null : budgetStage(store, cfg.budget, metrics, log, budgetFailures)
    return [...leading, ...(budget === null ? [] : [budget]), ...policyStages(cfg, log)] // budget before policy (DESIGN.md)
  }
  const gateway = new Gateway(stagesFor(config), upstream, audit, log, concurrency)
  let current = config

  let shuttingDown = false
  const routes = localRoutes({
    metrics,
    readiness,
    isShuttingDown: () => shuttingDown,
    beforeMetrics: () => audit.observeQueues(),
    resourceMetadata: config.auth.resourceMetadata,
    readyDetails: store === null ? undefined : () => ({ budget_fail_opens_last_minute: budget?.failOpensLastMinute() ?? 0 }),
  })
  const requestTimeoutMs = config.limits.requestTimeoutSeconds * 1000
  const server = createServer(
    {
      keepAliveTimeout: 65_000,
      // Node's requestTimeout covers receiving the request (a trickled body gets 408), never the
      // response: SSE streams stay open for as long as the client wants.
      requestTimeout: requestTimeoutMs,
      headersTimeout: Math.min(60_000, requestTimeoutMs),
      connectionsCheckingInterval: Math.min(30_000, Math.max(100, requestTimeoutMs / 4)),
    },
    (req, res) => {
      // Draining: answer what arrives on a kept-alive connection, but close the connection after it
      // (gateway.drain() does the same for proxied requests already in flight).
      if (shuttingDown) res.shouldKeepAlive = false
      if (!routes.handle(req, res)) void gateway.handle(req, res)
    },
  )
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(config.listen.port, config.listen.host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address() as AddressInfo
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address
  log.info('wardline listening', { listen: `${host}:${address.port}`, upstream: config.upstream.url, auth: config.auth.mode })

  let stopping: Promise<void> | null = null
  const shutdown = (): Promise<void> => {
    stopping ??= (async () => {
      shuttingDown = true
      gateway.drain()
      if (config.shutdownDelaySeconds > 0) {
        // Keep serving while /readyz says 503, so load balancers stop sending before connections are refused.
        log.info('not ready: still serving during shutdown_delay_seconds', { seconds: config.shutdownDelaySeconds })
        await sleep(config.shutdownDelaySeconds * 1000)
      }
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      const deadline = Date.now() + config.shutdownGraceSeconds * 1000
      while (gateway.inFlight > 0 && Date.now() < deadline) {
        server.closeIdleConnections() // a connection whose last response just ended takes no new request
        await sleep(20)
      }
      if (gateway.inFlight > 0) log.warn('shutdown grace period over: closing open requests', { in_flight: gateway.inFlight })
      gateway.cuttingConnections = true
      server.closeAllConnections()
      await closed
      // Requests cut short above write their audit entry in their `finally` once their relay or stage
      // settles (a budget check is bounded by check_timeout_seconds): wait for that, bounded, so the
      // trail is complete before it is flushed and closed.
      const settleBy = Date.now() + Math.max(2000, config.budget.checkTimeoutSeconds * 1000 + 1000)
      while (gateway.inFlight > 0 && Date.now() < settleBy) await sleep(10)
      if (gateway.inFlight > 0)
        log.error('requests still running after shutdown: their audit entries may be missing', { in_flight: gateway.inFlight })
      // Bounded: a sink that never completes a write (a stdout reader that stopped reading) must not
      // keep the process from exiting. The Postgres writer bounds itself well inside this.
      await withDeadline(audit.close(), AUDIT_CLOSE_TIMEOUT_MS, 'audit trail not flushed in time').catch((err: unknown) => {
        log.error('audit trail not fully written at shutdown: the entries still queued are lost', {
          error: describeError(err),
          pending: Object.fromEntries(audit.writers.map((w) => [w.sink.name, w.pending])),
        })
      })
      await upstream.destroy()
      authenticator.close?.()
      for (const close of closers.reverse()) await close()
      log.info('wardline stopped')
    })()
    return stopping
  }

  const reload = (next: Config): string[] => {
    const restartNeeded = keysNeedingRestart(current, next)
    gateway.replaceStages(stagesFor({ ...current, budget: next.budget, policy: next.policy }))
    audit.reopen()
    current = { ...current, budget: next.budget, policy: next.policy }
    log.info('configuration reloaded: budget and policy apply to new requests; budget counts kept', { restart_needed_for: restartNeeded })
    if (restartNeeded.length > 0) log.warn('changed settings take effect only after a restart', { keys: restartNeeded })
    return restartNeeded
  }

  return { url: `http://${host}:${address.port}`, server, metrics, audit, shutdown, reload }
}

/** The budget store, or null (and nothing counted) while features.budget_enforcement is off. */
/**
 * The budget store: none while features.budget_enforcement is off (nothing counted), the one a test
 * injects, the shared Postgres store (with its reaper) when there is a pool, else memory.
 */
async function openBudgetStore(
  config: Config,
  pool: Pool | null,
  injected: BudgetStore | undefined,
  log: Logger,
  closers: Array<() => Promise<void> | void>,
): Promise<BudgetStore | null> {
  if (!config.features.budgetEnforcement) {
    if (config.budget.configured) log.warn('features.budget_enforcement is false: the budget: block is ignored and nothing is counted')
    return null
  }
  let store: BudgetStore
  if (injected !== undefined) {
    store = injected
  } else if (pool !== null) {
    store = await openPostgresBudget(pool, config, log, closers)
  } else {
    store = new MemoryBudgetStore()
  }
  if (store instanceof MemoryBudgetStore) {
    log.info(
      'budgets are kept in memory: limits are per process, so each replica enforces them separately (features.postgres_storage shares them)',
    )
  }
  closers.push(() => store.close())
  return store
}

async function openAuthenticator(config: Config, log: Logger): Promise<Authenticator> {
  if (config.auth.mode === 'header') {
    log.warn('auth.mode is header: identities are taken from X-Wardline-Identity unverified; use only behind a trusted proxy')
    return new HeaderAuthenticator()
  }
  return JwtAuthenticator.open(config.auth.jwt, log)
}

/** Policy goes last (DESIGN.md: budget before policy). No policy: no stage, and a notice that nothing is gated. */
function policyStages(config: Config, log: Logger): Stage[] {
  const policy = config.policy
  if (policy === null) {
    log.warn('no policy configured (policy or policy_file): every tool, resource and prompt call is allowed')
    return []
  }
  log.info('policy loaded', { source: policy.source, rules: policy.rules.length, default: policy.default })
  return [policyStage(compilePolicy(policy))]
}

/** Longest wait at shutdown for the audit sinks to take every queued entry. */
const AUDIT_CLOSE_TIMEOUT_MS = 30_000

/** Startup bound on reaching the database: fail with one clear line instead of hanging (issue 6). */
const POSTGRES_STARTUP_TIMEOUT_MS = 5000

/** The one pool for every Postgres feature, reachable and migrated, or a WL_POSTGRES_UNAVAILABLE error. */
async function openPostgres(config: Config, log: Logger, closers: Array<() => Promise<void> | void>): Promise<Pool> {
  const checkTimeoutMs = config.budget.checkTimeoutSeconds * 1000
  const pool = openPool(config.postgres as NonNullable<Config['postgres']>, log, {
    // A budget check cannot use a connection it gets after its own deadline. (A reload that raises
    // check_timeout_seconds keeps this startup bound: checks then fail open early, never late.)
    connectionTimeoutMs: Math.max(1, checkTimeoutMs),
    // The server-side backstop must not cut a check the config allows to run longer.
    statementTimeoutMs: Math.max(30_000, checkTimeoutMs + 1000),
  })
  try {
    await checkReachable(pool, POSTGRES_STARTUP_TIMEOUT_MS)
    const { version } = await migrate(pool, log)
    log.info('postgres storage ready', { schema_version: version, max_connections: config.postgres?.maxConnections })
  } catch (err) {
    await pool.end().catch(() => undefined)
    throw err
  }
  // Bounded: against a blackholed network pg waits for goodbyes that never come; by then every audit
  // entry is in the table or fsynced in the spill file, so giving up on the goodbye loses nothing.
  closers.push(() => Promise.race([pool.end(), new Promise<void>((r) => setTimeout(r, 3000).unref())]))
  return pool
}

/** The shared budget store (with its reaper), or undefined while budgets are off. */
async function openPostgresBudget(
  pool: Pool,
  config: Config,
  log: Logger,
  closers: Array<() => Promise<void> | void>,
): Promise<BudgetStore> {
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: config.budget.checkTimeoutSeconds * 1000, log })
  await store.calibrate()
  const reaper = new BudgetReaper(pool, log)
  reaper.start()
  closers.push(() => reaper.close())
  return store
}
