import type { Registry } from 'prom-client'
import type { Server } from 'node:http'
import type { Pool } from 'pg'
import { adminRoutes } from '../admin/routes'
import { AdminServer } from '../admin/server'
import { JsonlAuditSink } from '../audit/jsonl-sink'
import { auditReservationStage } from '../audit/reservation-stage'
import { AuditTrail } from '../audit/trail'
import { auditRetention } from '../audit/retention'
import { PostgresAuditSink } from '../audit/postgres-sink'
import { AuditSpill } from '../audit/spill'
import { AuditWriter } from '../audit/writer'
import { HeaderAuthenticator } from '../auth/header-authenticator'
import { JwtAuthenticator } from '../auth/jwt-authenticator'
import { revocationStage } from '../auth/revocation-stage'
import { MemoryRevocationList, type RevocationList } from '../auth/revocations'
import { PostgresRevocationList } from '../auth/revocations-postgres'
import { type Authenticator, authStage } from '../auth/stage'
import { FailOpenWindow } from '../budget/fail-open-window'
import { LocalLimiter } from '../budget/local-limiter'
import { MemoryBudgetStore } from '../budget/memory-store'
import { PostgresBudgetStore } from '../budget/postgres-store'
import { restartedBuckets } from '../budget/buckets'
import { budgetStage } from '../budget/stage'
import { StartingBudgetStore } from '../budget/starting-store'
import type { BudgetStore } from '../budget/store'
import { ConcurrencyLimiter } from '../concurrency/limiter'
import { concurrencyStages } from '../concurrency/stage'
import { diffConfigs } from '../config/diff'
import { enforcementLost } from '../config/reload-guard'
import { keysNeedingRestart } from '../config/restart-keys'
import { configWarnings } from '../config/warnings'
import type { Config } from '../config/types'
import { ConfigError } from '../errors'
import { pathStage } from '../http/path-stage'
import { httpStage } from '../http/stage'
import { mcpHeadersStage } from '../jsonrpc/mcp-headers'
import { jsonRpcStage } from '../jsonrpc/stage'
import { createLogger, type Logger, RateLimitedLog } from '../log'
import { AuditMetrics, labelledNames } from '../audit/metrics'
import { RevocationMetrics } from '../auth/metrics'
import { BudgetMetrics } from '../budget/metrics'
import { ConcurrencyMetrics } from '../concurrency/metrics'
import { metricsRegistry } from '../metrics-registry'
import { SessionMetrics } from '../session/metrics'
import { UpstreamMetrics } from '../upstream/metrics'
import { ServerMetrics } from './metrics'
import type { ReadinessCheck } from '../readiness'
import type { Stage } from '../pipeline/stage'
import { compilePolicy } from '../policy/compile'
import { type ListFilterState, listFilterStage, listFilterState } from '../policy/list-filter'
import { policyStage, policyVerdictStage } from '../policy/stage'
import { migrate } from '../postgres/migrate'
import { PostgresBringUp } from '../postgres/bring-up'
import { checkReachable, openPool } from '../postgres/pool'
import { postgresReadiness } from '../postgres/readiness'
import { BudgetReaper } from '../postgres/reaper'
import { sessionStages } from '../session/stage'
import { upstreamFailureReporter } from '../upstream/failures'
import { Upstream } from '../upstream/forward'
import { UpstreamProbe } from '../upstream/probe'
import { LegacyStreams } from '../upstream/legacy-streams'
import { Gateway } from './gateway'
import { lingerBounds } from './linger'
import { type Closer, Lifecycle, type LifecycleParts } from './lifecycle'
import { MetricsListener } from './metrics-listener'
import { localRoutes } from './routes'
import { type TlsMaterial, readTlsFiles } from './tls'

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

function gatewayMetrics(processMetrics: boolean): GatewayMetrics {
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
 * The composition root: turns a validated Config into a listening gateway. It only builds and wires
 * (adapters picked from config, costly work done before the first request); Lifecycle owns starting,
 * draining, reloading and stopping.
 */
export async function startGateway(config: Config, options: GatewayOptions = {}): Promise<RunningGateway> {
  const log = options.log ?? createLogger(config.logLevel, { format: config.logFormat })
  const metrics = gatewayMetrics(options.processMetrics ?? false)
  /** Released in reverse order of acquisition at shutdown, after the audit trail is flushed. */
  const closers: Closer[] = []
  const opened: Opened = { audit: null, revocations: null, admin: null, metrics: null }
  let lifecycle: Lifecycle | null = null
  let parts: LifecycleParts
  try {
    parts = await wire(config, options, log, metrics, closers, opened, () => lifecycle?.draining ?? false)
  } catch (err) {
    // Whatever was opened before the failure is released here: nothing was served.
    await opened.audit?.close().catch(() => undefined)
    for (const close of closers.reverse()) await Promise.resolve(close()).catch(() => undefined)
    throw err
  }
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
    revocations: opened.revocations as RevocationList,
    adminUrl: opened.admin?.url ?? null,
    metricsUrl: opened.metrics?.url ?? null,
    shutdown: () => started.shutdown(),
    reload: (next) => started.reload(next),
    reloadCertificates: () => {
      // Both, even when the first fails: each listener keeps or replaces its own.
      const main = config.tls === null || started.reloadCertificates()
      const admin = opened.admin === null || (config.admin?.tls ?? null) === null || opened.admin.reloadCertificates()
      return main && admin
    },
  }
}

/** What wire() has opened so far, for startGateway to release on failure or hand out. */
interface Opened {
  audit: AuditTrail | null
  revocations: RevocationList | null
  /** The admin API's listener, when admin.listen is set. */
  admin: AdminServer | null
  /** The metrics listener, when metrics.listen is set. */
  metrics: MetricsListener | null
}

/** Opens every adapter the config asks for and wires the stages, the gateway and the local routes. */
async function wire(
  config: Config,
  options: GatewayOptions,
  log: Logger,
  metrics: GatewayMetrics,
  closers: Closer[],
  opened: Opened,
  draining: () => boolean,
): Promise<LifecycleParts> {
  const readiness: ReadinessCheck[] = []
  // Certificates before anything opens: a missing or mismatched file stops startup naming the key and file.
  const tls = config.tls === null ? null : readTlsFiles(config.tls, 'tls')
  const adminTls: TlsMaterial | null = config.admin?.tls ? readTlsFiles(config.admin.tls, 'admin.tls') : null
  // Postgres first: with budget.on_store_error closed an unreachable database must stop startup before
  // anything listens; otherwise its bring-up goes on in the background (launched below). The pool is
  // the first closer, so it is released last (after the audit trail is flushed into it). The spill
  // file is checked before it: nothing is open yet if it fails.
  const postgresOn = config.features.postgresStorage && config.postgres !== null
  const spill = postgresOn ? AuditSpill.open(config.audit.spillFile) : null
  const postgres = postgresOn ? await openPostgres(config, log, closers) : null
  const audit = (opened.audit = await openAuditTrail(config, postgres, spill, metrics, log, readiness))

  const authenticator = await openAuthenticator(config, log)
  closers.push(() => authenticator.close?.())
  const store = await openBudgetStore(config, postgres, options.budgetStore, metrics, log, closers)
  if (postgres !== null && config.audit.retentionDays !== null) {
    openAuditRetention(config.audit.retentionDays, postgres, metrics, log, closers)
  }
  // Built before the stages (its stage follows auth) and handed to the admin listener when there is one.
  const revocations = (opened.revocations = openRevocations(postgres, metrics, log, closers))
  // Pushed after every Postgres user, so it is closed before them: no step starts a reaper or a
  // heartbeat after its closer ran.
  if (postgres !== null) {
    closers.push(() => postgres.bringUp.close())
    await launchPostgres(config, postgres, log)
  }
  const upstream = new Upstream(
    config.upstream,
    config.http.trustedProxies,
    upstreamFailureReporter((kind) => metrics.upstream.upstreamError(kind), log, config.upstream.url),
  )
  closers.push(() => upstream.destroy())
  for (const warning of configWarnings(config)) log.warn(warning)
  // Its first probe runs while the rest is wired, and is awaited below: the first /readyz already knows.
  const firstProbe = openUpstreamProbe(config, metrics, log, closers, readiness)
  // Refusals by tenant and tool are labelled with the names the config gives (reloads replace them).
  metrics.audit.nameLabels(labelledNames(config.budget, config.policy))
  const stages = stageChain(config, { audit, authenticator, revocations, store, metrics, log, sessionClock: options.sessionClock })
  const gateway = new Gateway(
    stages.build(config),
    upstream,
    audit,
    log,
    config.toolRefusals,
    stages.legacyStreams,
    lingerBounds(config.limits.maxBodyBytes),
  )

  let current = config
  // The last config read from the file (current mixes it with startup values): the next reload's diff starts from it.
  let loaded = config
  const applyReload = (next: Config): string[] => {
    // Before anything changes: a file read mid-write is valid YAML without its last blocks.
    const lost = enforcementLost(loaded, next)
    if (lost.length > 0) throw new ConfigError(lost)
    const restartNeeded = keysNeedingRestart(current, next)
    const diff = diffConfigs(loaded, next, restartNeeded)
    loaded = next
    const restarted = store === null ? [] : restartedBuckets(current.budget, next.budget)
    current = { ...current, budget: next.budget, policy: next.policy, toolRefusals: next.toolRefusals }
    gateway.replaceStages(stages.build(current), current.toolRefusals)
    metrics.audit.nameLabels(labelledNames(current.budget, current.policy))
    audit.reopen()
    log.info('configuration reloaded: budget, policy and tool_refusals apply to new requests; budget counts kept', {
      restart_needed_for: restartNeeded,
      ...diff.summary,
    })
    for (const change of diff.changes) log.info('configuration key changed', { ...change })
    if (restartNeeded.length > 0) log.warn('changed settings take effect only after a restart', { keys: restartNeeded })
    if (restarted.length > 0)
      log.warn('budget windows whose length changed start counting afresh; the rest keep their counts', { buckets: restarted })
    return restartNeeded
  }
  const routes = localRoutes({
    metrics: metrics.server,
    readiness,
    isShuttingDown: draining,
    beforeMetrics: () => audit.observeQueues(),
    resourceMetadata: config.auth.resourceMetadata,
    readyDetails: () => ({ ...(store === null ? {} : stages.budgetDetails()), ...revocations.details() }),
    metricsElsewhere: config.metrics !== null,
  })
  if (config.metrics === null) {
    log.info(
      '/metrics is served on the public listener without a token; metrics.listen (e.g. 127.0.0.1:9464) moves it to a listener of its own',
    )
  } else {
    const metricsListener = (opened.metrics = await MetricsListener.start(config.metrics, config, routes, log))
    // A closer, not one of the listeners closed as shutdown begins: a scrape during the drain still
    // sees the last requests counted, and /readyz there says 503 until the end.
    closers.push(() => metricsListener.close())
  }
  if (config.admin !== null) {
    // Last, once everything it reads exists: a reload changes the budget config it reports on.
    const routesOfAdmin = adminRoutes({
      store,
      config: () => current.budget,
      scope: config.features.postgresStorage ? 'all replicas' : 'this replica',
      revocations,
    })
    const admin = (opened.admin = await AdminServer.start(config.admin, config, routesOfAdmin, audit, log, adminTls))
    closers.push(() => admin.close()) // a startup that fails after this point releases it here
  }
  const listeners = opened.admin === null ? [] : [() => opened.admin?.close()]
  await firstProbe
  return { gateway, routes, audit, log, closers, listeners, applyReload, tls }
}

/** The request stages, in order, as a function of the reloadable config (budget and policy). */
interface StageChain {
  build(config: Config): Stage[]
  /**
   * /readyz's budget fields, across reloads: checks that failed open and checks judged locally in the
   * last minute, and `budget_store`: `degraded` while checks are judged locally, `failing_open` while
   * they fail open, else `ok`.
   */
  budgetDetails(): Record<string, unknown>
  /** The open legacy /sse streams by session, for refusals answered as tool results there. */
  readonly legacyStreams: LegacyStreams
}

interface StageParts {
  readonly audit: AuditTrail
  readonly authenticator: Authenticator
  readonly revocations: RevocationList
  readonly store: BudgetStore | null
  readonly metrics: GatewayMetrics
  readonly log: Logger
  readonly sessionClock?: () => number
}

function stageChain(config: Config, parts: StageParts): StageChain {
  const { audit, authenticator, revocations, store, metrics, log } = parts
  // One limiter for the process, in the stages every reload reuses, so the counts of requests in
  // flight survive a reload (max_concurrent_per_identity itself is a restart key).
  const concurrency = concurrencyStages(
    new ConcurrencyLimiter(config.limits.maxConcurrentPerIdentity),
    metrics.concurrency,
    config.upstream.timeoutSeconds,
  )
  // Host and Origin first: a DNS-rebinding page gets nothing, not even a 401 challenge.
  const leading = [
    httpStage(config.http),
    authStage(authenticator, config.auth),
    // On every request, a token answered from the token cache included: a revocation applies at once.
    revocationStage(revocations, config.auth, () => metrics.revocations.revokedRequests.inc()),
    // Before the body is read: a caller presenting a session another principal created gets 404.
    ...sessionStages(config.limits, metrics.session, log, parts.sessionClock),
    // Before the body is read: a capped caller cannot make the gateway buffer bodies without bound.
    concurrency.slot,
    pathStage(),
    jsonRpcStage(config.limits),
    // Right after parsing: Mcp-Method / Mcp-Name that disagree with the body are refused before an
    // audit reservation or a budget unit is taken for a call whose headers say another.
    mcpHeadersStage(),
    // Once parsed: a body read past the cap goes on only as an `initialize`, a listen or a client's
    // answers; before anything is charged or reserved.
    concurrency.verdict,
    auditReservationStage(audit),
  ]
  // The local limiter too (on_store_error: local), so a reload during an outage keeps its counts and
  // the shared counts it remembered; made even when the config says open, as a reload may say local.
  const budgetFailures = {
    failOpens: new FailOpenWindow(Date.now),
    degraded: new FailOpenWindow(Date.now),
    warnings: new RateLimitedLog(log),
    localLimiter: new LocalLimiter(),
  }
  // The list filter of every chain judges with the policy of the latest one, so a stream opened
  // before a reload lists by the new rules.
  const policies = listFilterState()
  // Read only while refusals are answered as tool results: a refused legacy POST's result travels on
  // its session's /sse stream. One registry across reloads, so every stream is found.
  const legacyStreams = new LegacyStreams()
  const legacyReader = legacyStreams.stage()
  return {
    legacyStreams,
    build(cfg) {
      const budget = store === null ? [] : [budgetStage(store, cfg.budget, metrics.budget, log, budgetFailures)]
      const policy = policyStages(cfg, log, policies)
      // Policy judges first, so the budget stage knows a denied call (it charges only the caller's own
      // bucket), and its verdict is answered after the budget: a call over budget gets 429 (architecture.md, Principles).
      const legacy = cfg.toolRefusals === 'result' ? [legacyReader] : []
      return [...leading, ...legacy, ...policy, ...budget, ...(policy.length === 0 ? [] : [policyVerdictStage])]
    },
    budgetDetails() {
      const failOpens = budgetFailures.failOpens.count()
      const degraded = budgetFailures.degraded.count()
      return {
        budget_fail_opens_last_minute: failOpens,
        budget_degraded_checks_last_minute: degraded,
        budget_store: degraded > 0 ? 'degraded' : failOpens > 0 ? 'failing_open' : 'ok',
      }
    },
  }
}

/**
 * upstream_health_check: the probe of the upstream, its /readyz check and its metrics, or nothing when
 * it is off. Returns its first probe (which logs what it found). The closer stops its timer.
 */
function openUpstreamProbe(
  config: Config,
  metrics: GatewayMetrics,
  log: Logger,
  closers: Closer[],
  readiness: ReadinessCheck[],
): Promise<void> {
  const healthCheck = config.upstream.healthCheck
  if (healthCheck === null) return Promise.resolve()
  const probe = new UpstreamProbe(healthCheck, config.upstream.url, log, metrics.upstream.upstreamProbeListener())
  closers.push(() => probe.close())
  readiness.push(probe.readiness())
  return probe.start()
}

/** Every configured audit sink, each behind its writer (queue, retries; spill for Postgres). */
async function openAuditTrail(
  config: Config,
  postgres: OpenedPostgres | null,
  spill: AuditSpill | null,
  metrics: GatewayMetrics,
  log: Logger,
  readiness: ReadinessCheck[],
): Promise<AuditTrail> {
  const writers: AuditWriter[] = []
  const queueing = {
    maxQueueEntries: config.audit.maxQueueEntries,
    onDropped: (n: number, name: string) => metrics.audit.auditDropped.labels(name).inc(n),
  }
  if (config.audit.output !== null) {
    writers.push(new AuditWriter(await JsonlAuditSink.open(config.audit.output), log, queueing))
  }
  if (postgres !== null && spill !== null) {
    const { pool, bringUp } = postgres
    const pgWriter = new AuditWriter(new PostgresAuditSink(pool), log, {
      ...queueing,
      spill,
      onSpilled: (n, name) => metrics.audit.auditSpilled.labels(name).inc(n),
      onRejected: (n, name) => metrics.audit.auditRejected.labels(name).inc(n),
      onReplayed: (n, name) => metrics.audit.auditReplayed.labels(name).inc(n),
    })
    writers.push(pgWriter)
    readiness.push(postgresReadiness(pool, { auditSpillPending: () => pgWriter.hasSpilled, notReady: () => bringUp.cause }))
    metrics.audit.observeAuditSpill(pgWriter.sink.name, [spill.path, spill.replayingPath])
    // Entries spilled while the database was unreachable, or had no audit_entries table yet (a start
    // during an outage), go in once it is brought up rather than at the writer's next replay tick.
    bringUp.add({
      name: 'audit replay',
      run: () => {
        if (pgWriter.hasSpilled) void pgWriter.replayNow()
      },
    })
  }
  for (const w of writers) metrics.audit.auditQueueLimit.labels(w.sink.name).set(config.audit.maxQueueEntries)
  return new AuditTrail(writers, metrics.audit, log)
}

/**
 * audit.retention_days: one replica at a time deletes old audit_entries rows in batches. Started by
 * a bring-up step (after the migrations: the table must exist), stopped by its closer before the pool ends.
 */
function openAuditRetention(days: number, postgres: OpenedPostgres, metrics: GatewayMetrics, log: Logger, closers: Closer[]): void {
  const retention = auditRetention(postgres.pool, log, days, {
    onDeleted: (rows) => {
      metrics.audit.auditRetentionDeleted.inc(rows)
      log.info('audit retention deleted old audit entries', { rows, retention_days: days })
    },
  })
  closers.push(() => retention.close())
  postgres.bringUp.add({ name: 'audit retention', run: () => retention.start() })
}

/**
 * The revocation list: with Postgres storage the shared table (loaded by a bring-up step once the
 * migrations have made it, then refreshed every 250 ms until its closer runs; empty and reported stale
 * until the first load), else this process's own list.
 */
function openRevocations(postgres: OpenedPostgres | null, metrics: GatewayMetrics, log: Logger, closers: Closer[]): RevocationList {
  if (postgres === null) {
    const list = new MemoryRevocationList()
    metrics.revocations.observeRevocations(() => list.stats())
    return list
  }
  const list = new PostgresRevocationList(postgres.pool, {
    log,
    onRefreshFailed: () => metrics.revocations.revocationRefreshFailures.inc(),
  })
  metrics.revocations.observeRevocations(() => list.stats())
  closers.push(() => list.close())
  postgres.bringUp.add({ name: 'revocation list', run: () => list.start() })
  return list
}

/**
 * The budget store: none while features.budget_enforcement is off (nothing counted), the one a test
 * injects, the shared Postgres store (with its reaper) when Postgres storage is on, else memory.
 */
async function openBudgetStore(
  config: Config,
  postgres: OpenedPostgres | null,
  injected: BudgetStore | undefined,
  metrics: GatewayMetrics,
  log: Logger,
  closers: Closer[],
): Promise<BudgetStore | null> {
  if (!config.features.budgetEnforcement) {
    if (config.budget.configured) log.warn('features.budget_enforcement is false: the budget: block is ignored and nothing is counted')
    return null
  }
  let store: BudgetStore
  if (injected !== undefined) {
    store = injected
  } else if (postgres !== null) {
    store = await openPostgresBudget(postgres, config, metrics, log, closers)
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

/**
 * The policy stage (its verdict is answered after the budget stage) and the list filter. No policy: no
 * stage, and a notice that nothing is gated. A policy that allows everything hides nothing: no filter.
 */
function policyStages(config: Config, log: Logger, policies: ListFilterState): Stage[] {
  const policy = config.policy
  policies.current = null
  if (policy === null) {
    log.warn('no policy configured (policy or policy_file): every tool, resource and prompt call is allowed')
    return []
  }
  log.info('policy loaded', { source: policy.source, rules: policy.rules.length, default: policy.default })
  const compiled = compilePolicy(policy)
  if (!policy.filterLists) return [policyStage(compiled)]
  // While the policy can deny nothing the filter passes every answer as it is; it stays in the chain
  // so a stream opened now is filtered once a reload adds a deny rule.
  if (compiled.canDeny) policies.current = compiled
  return [policyStage(compiled), listFilterStage(policies)]
}

/** Bound on reaching the database, at startup and on each attempt after: one clear line instead of hanging. */
const POSTGRES_STARTUP_TIMEOUT_MS = 5000

/** The one pool for every Postgres feature, and the steps that bring its storage up. */
interface OpenedPostgres {
  readonly pool: Pool
  readonly bringUp: PostgresBringUp
  /** The schema version the migrations left, once they have run. */
  readonly schema: { version: number | null }
}

/**
 * The one pool for every Postgres feature, reached and migrated now if the database answers. If it
 * does not: a WL_POSTGRES_UNAVAILABLE error with budget.on_store_error closed (nothing is served
 * without the shared budgets), else the bring-up is left to the background (launchPostgres).
 */
async function openPostgres(config: Config, log: Logger, closers: Closer[]): Promise<OpenedPostgres> {
  const checkTimeoutMs = config.budget.checkTimeoutSeconds * 1000
  const pool = openPool(config.postgres as NonNullable<Config['postgres']>, log, {
    // A budget check cannot use a connection it gets after its own deadline. (A reload that raises
    // check_timeout_seconds keeps this startup bound: checks then fail open early, never late.)
    connectionTimeoutMs: Math.max(1, checkTimeoutMs),
    // The server-side backstop must not cut a check the config allows to run longer.
    statementTimeoutMs: Math.max(30_000, checkTimeoutMs + 1000),
  })
  // Bounded: against a blackholed network pg waits for goodbyes that never come; by then every audit
  // entry is in the table or fsynced in the spill file, so giving up on the goodbye loses nothing.
  closers.push(() => Promise.race([pool.end(), new Promise<void>((r) => setTimeout(r, 3000).unref())]))
  const bringUp = new PostgresBringUp(log)
  const schema = { version: null as number | null }
  bringUp.add({ name: 'reachable', run: () => checkReachable(pool, POSTGRES_STARTUP_TIMEOUT_MS) })
  bringUp.add({
    name: 'migrations',
    run: async () => {
      schema.version = (await migrate(pool, log)).version
    },
  })
  await bringUp.startupAttempt(failsClosed(config))
  return { pool, bringUp, schema }
}

/** budget.on_store_error closed: the operator prefers no service to service without shared budgets. */
function failsClosed(config: Config): boolean {
  return config.budget.onStoreError === 'closed'
}

/**
 * Once wiring is done: the steps added since the first attempt run now (unless one already failed);
 * storage not ready by then is announced once and brought up in the background.
 */
async function launchPostgres(config: Config, postgres: OpenedPostgres, log: Logger): Promise<void> {
  const { bringUp } = postgres
  await bringUp.startupAttempt(failsClosed(config))
  if (!bringUp.ready) {
    const fallback = config.features.budgetEnforcement
      ? `budget.on_store_error: ${config.budget.onStoreError}`
      : 'audit entries spilled to audit.spill_file'
    log.warn(`postgres is not ready at startup: serving with ${fallback} until it answers (retrying in the background)`, {
      cause: bringUp.cause,
    })
  }
  const after = bringUp.attempts
  bringUp.launch(() =>
    log.info('postgres storage ready', {
      schema_version: postgres.schema.version,
      max_connections: config.postgres?.maxConnections,
      ...(bringUp.attempts > after ? { attempts: bringUp.attempts } : {}),
    }),
  )
}

/**
 * The shared budget store with its reaper, behind a StartingBudgetStore: until Postgres storage is
 * brought up every check fails at once (budget.on_store_error decides), then it only delegates.
 */
async function openPostgresBudget(
  postgres: OpenedPostgres,
  config: Config,
  metrics: GatewayMetrics,
  log: Logger,
  closers: Closer[],
): Promise<BudgetStore> {
  const { pool, bringUp } = postgres
  const store = new PostgresBudgetStore(pool, {
    checkTimeoutMs: config.budget.checkTimeoutSeconds * 1000,
    log,
    onRefunded: () => metrics.budget.budgetRefunds.labels('late_verdict').inc(),
  })
  metrics.budget.observeBudgetStore(() => store.stats())
  const reaper = new BudgetReaper(pool, log)
  closers.push(() => reaper.close())
  // The clock offset, then this replica's first heartbeat and its timer (a migrated schema first: the
  // heartbeat table is migration 004's).
  bringUp.add({ name: 'budget store', run: () => store.start() })
  // A step of its own: the bring-up checks for a shutdown between steps, so no reaper starts after close.
  bringUp.add({ name: 'budget reaper', run: () => reaper.start() })
  await bringUp.startupAttempt(failsClosed(config))
  return new StartingBudgetStore(store, bringUp)
}
