import { loadConfig } from '../config/load'
import type { Config } from '../config/types'
import { ConfigError, describeError } from '../errors'
import { createLogger, type Logger } from '../log'
import { type RunningGateway, startGateway } from '../server/compose'

/** A second SIGTERM/SIGINT sooner than this after the first is the same request delivered twice. */
const REPEATED_SIGNAL_MS = 1000

/**
 * `wardline serve`: starts the gateway and stops it gracefully on SIGTERM/SIGINT (exit 0), or
 * reports why it could not start on one line (exit 1).
 */
export async function serve(configPath: string): Promise<RunningGateway> {
  let config: Config
  try {
    config = loadConfig(configPath)
  } catch (err) {
    if (err instanceof ConfigError) process.stderr.write(`wardline: ${configPath}: ${err.message}\n`)
    else process.stderr.write(`wardline: ${describeError(err)}\n`)
    process.exit(1)
  }
  const log = createLogger(config.logLevel)
  let gateway: RunningGateway
  try {
    gateway = await startGateway(config, { log, processMetrics: true })
  } catch (err) {
    process.stderr.write(`wardline: cannot start: ${describeError(err)}\n`)
    process.exit(1)
  }
  let stoppingSince: number | null = null
  const stop = (signal: string): void => {
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
  process.on('SIGHUP', () => reload(configPath, gateway, log))
  process.on('SIGTERM', () => stop('SIGTERM'))
  process.on('SIGINT', () => stop('SIGINT'))
  return gateway
}

/**
 * SIGHUP: re-read the file and apply its budget and policy. A file that fails validation changes
 * nothing: the running configuration stays, and every problem is logged.
 */
export function reload(configPath: string, gateway: RunningGateway, log: Logger): boolean {
  let next: Config
  try {
    next = loadConfig(configPath)
  } catch (err) {
    const problems = err instanceof ConfigError ? err.problems : [describeError(err)]
    log.error('configuration reload rejected: the running configuration is unchanged', { config: configPath, problems })
    gateway.audit.reopen() // log rotation does not wait for a valid config
    return false
  }
  gateway.reload(next)
  return true
}
