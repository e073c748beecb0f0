import { configSecrets } from '../config/diff'
import { loadConfig, loadConfigBlocks } from '../config/load'
import type { Config, LogFormat } from '../config/types'
import { ConfigError, type ErrorCode, WardlineError, describeError } from '../errors'
import { addLogSecrets, createLogger, type Logger, writeLogRecord } from '../log'
import { type RunningGateway, startGateway } from '../server/compose'

/** A second SIGTERM/SIGINT sooner than this after the first is the same request delivered twice. */
const REPEATED_SIGNAL_MS = 1000

/**
 * `wardline serve`: starts the gateway and stops it gracefully on SIGTERM/SIGINT (exit 0), or
 * reports why it could not start as one log record with its WL_* code (exit 1).
 */
export async function serve(configPath: string): Promise<RunningGateway> {
  let config: Config
  try {
    config = loadConfig(configPath)
  } catch (err) {
    const problems = err instanceof ConfigError ? err.problems : [describeError(err)]
    writeLogRecord(
      {
        level: 'error',
        message: 'configuration invalid: the gateway did not start',
        code: 'WL_CONFIG_INVALID',
        config: configPath,
        problems,
      },
      { format: formatOfInvalidFile(configPath) },
    )
    process.exit(1)
  }
  const secrets = configSecrets(config)
  const log = createLogger(config.logLevel, { format: config.logFormat, secrets })
  // Handled from before the listener exists: SIGHUP's default action ends the process, and a log
  // rotation's `kill -HUP` can come the moment the "wardline listening" line appears, before startup
  // has returned here. One that arrives while starting is applied once started.
  let serving: RunningGateway | null = null
  let reloadPending = false
  process.on('SIGHUP', () => {
    if (serving !== null) reload(configPath, serving, log)
    else if (!reloadPending) {
      reloadPending = true
      log.info('reload requested while starting: applied once the gateway has started')
    }
  })
  // Also handled from before the listener exists: a supervisor may send SIGTERM the moment
  // "wardline listening" appears, before startup has returned here, and the default action would end
  // the process without draining or flushing the audit trail. One that arrives while starting stops
  // the gateway once started.
  let stopPending: string | null = null
  const onStopSignal = (signal: string): void => {
    if (serving !== null) stop(serving, signal)
    else if (stopPending === null) {
      stopPending = signal
      log.info('stop requested while starting: the gateway stops once started', { signal })
    }
  }
  process.on('SIGTERM', () => onStopSignal('SIGTERM'))
  process.on('SIGINT', () => onStopSignal('SIGINT'))
  handleProcessFailures(
    process,
    log,
    () => serving,
    config,
    (code) => process.exit(code),
  )
  let gateway: RunningGateway
  try {
    gateway = await startGateway(config, { log, processMetrics: true })
  } catch (err) {
    writeLogRecord(startupFailure(err, configPath), { format: config.logFormat, secrets })
    process.exit(1)
  }
  let stoppingSince: number | null = null
  const stop = (gateway: RunningGateway, signal: string): void => {
    if (stoppingSince !== null) {
      // Ctrl-C under npm or another runner reaches the process twice within milliseconds (the terminal
      // signals the group, the runner forwards): only a second signal a moment later means "now".
      if (Date.now() - stoppingSince < REPEATED_SIGNAL_MS) return
      // The operator asked twice: the graceful path is stuck or too slow for them. Stop now.
      log.error('second signal during shutdown: exiting at once; entries still queued for the audit trail are lost', { signal })
      process.exit(1)
    }
    stoppingSince = Date.now()
    log.info('shutting down', { signal })
    gateway.shutdown().then(
      () => process.exit(0),
      (err) => {
        log.error('shutdown failed', { error: describeError(err) })
        process.exit(1)
      },
    )
  }
  serving = gateway
  if (stopPending !== null) stop(gateway, stopPending)
  else if (reloadPending) reload(configPath, gateway, log)
  return gateway
}

/** What handleProcessFailures listens on: the process, or a stand-in in tests. */
export interface ProcessEvents {
  on(event: 'unhandledRejection', listener: (reason: unknown) => void): unknown
  on(event: 'uncaughtException', listener: (err: Error) => void): unknown
}

/**
 * The last line of defence, for a throw no request path caught (every request answers and audits its
 * own failures: Gateway.handle). docs/operations.md, "When the gateway fails", says why each is handled so:
 *
 * - an unhandled rejection is a promise nobody waited for (a background refresh, a refund): nothing
 *   ran half-way on the stack, so it is logged at error and the gateway keeps serving;
 * - an uncaught exception unwound synchronous code at an unknown point (a timer, an event handler):
 *   what it was changing may be half changed, so the gateway stops as on SIGTERM (the requests in
 *   flight finish within shutdown_grace_seconds and are audited, the audit trail is flushed) and the
 *   process exits 1, for the supervisor to restart it. Bounded: past shutdown_delay_seconds +
 *   shutdown_grace_seconds + 35 s (the audit flush's own bound is 30 s) it exits regardless.
 */
export function handleProcessFailures(
  events: ProcessEvents,
  log: Logger,
  gateway: () => RunningGateway | null,
  config: Pick<Config, 'shutdownDelaySeconds' | 'shutdownGraceSeconds'>,
  exit: (code: number) => void,
): void {
  events.on('unhandledRejection', (reason) => {
    log.error('unhandled promise rejection: the gateway keeps serving', {
      code: 'WL_INTERNAL',
      error: describeError(reason),
      stack: (reason as Error | null)?.stack,
    })
  })
  let stopping = false
  events.on('uncaughtException', (err) => {
    const running = gateway()
    const message = stopping
      ? 'uncaught exception while stopping after another: the shutdown goes on'
      : running === null
        ? 'uncaught exception while starting: exiting 1'
        : 'uncaught exception: stopping the gateway (requests in flight finish and are audited, the audit trail is flushed), then exiting 1'
    log.error(message, { code: 'WL_INTERNAL', error: describeError(err), stack: err?.stack })
    if (stopping) return // already on its way out
    if (running === null) return exit(1) // still starting: nothing served, nothing to flush
    stopping = true
    const boundMs = (config.shutdownDelaySeconds + config.shutdownGraceSeconds + 35) * 1000
    setTimeout(() => {
      log.error('shutdown after an uncaught exception took too long: exiting now; entries still queued are lost')
      exit(1)
    }, boundMs).unref()
    running.shutdown().then(
      () => exit(1),
      (failure: unknown) => {
        log.error('shutdown failed', { error: describeError(failure) })
        exit(1)
      },
    )
  })
}

/**
 * SIGHUP: re-read the file and apply its budget and policy. A file that fails validation, or that
 * lacks an enforcement block the running file has (a file read mid-write: config/reload-guard.ts),
 * changes nothing: the running configuration stays, and every problem is logged. The TLS listeners
 * re-read their certificate files first, whatever the file says: a renewal (certbot's deploy hook
 * sending `kill -HUP`) does not wait for a valid config, and a bad certificate does not hold back
 * a budget change.
 */
export function reload(configPath: string, gateway: RunningGateway, log: Logger): boolean {
  gateway.reloadCertificates()
  try {
    const next = loadConfig(configPath)
    addLogSecrets(log, configSecrets(next)) // a reload may bring a new secret (a rotated admin token)
    gateway.reload(next)
    return true
  } catch (err) {
    const problems = err instanceof ConfigError ? err.problems : [describeError(err)]
    log.error('configuration reload rejected: the running configuration is unchanged', { config: configPath, problems })
    gateway.audit.reopen() // log rotation does not wait for a valid config
    return false
  }
}

/**
 * The log_format a file asks for, read alone: a file whose other keys are invalid still says how its
 * errors should read. Unreadable or invalid itself: auto.
 */
function formatOfInvalidFile(path: string): LogFormat {
  try {
    return loadConfigBlocks(path, ['log_format']).log_format
  } catch {
    return 'auto'
  }
}

/** Why startGateway failed, as one record: the WL_* code of the failure (or of its cause), its message, its cause. */
export function startupFailure(err: unknown, configPath: string): { level: 'error'; message: string; [field: string]: unknown } {
  let code: ErrorCode = 'WL_INTERNAL'
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e instanceof WardlineError) {
      code = e.code
      break
    }
  }
  const message = err instanceof WardlineError ? err.message : describeError(err)
  const cause = err instanceof WardlineError && err.cause !== undefined ? describeError(err.cause) : null
  return {
    level: 'error',
    message: `cannot start: ${message}`,
    code,
    config: configPath,
    ...(cause !== null && !message.includes(cause) ? { cause } : {}),
  }
}
