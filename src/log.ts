import winston from 'winston'
import type { LogLevel } from './config/types'

export type Logger = winston.Logger

/**
 * Application logs: JSON lines on stderr. stdout is reserved for the audit trail (audit.output:
 * stdout), so nothing here may ever write there.
 */
export function createLogger(level: LogLevel = 'info'): Logger {
  return winston.createLogger({
    level,
    format: winston.format.combine(winston.format.timestamp(), winston.format.json()),
    transports: [new winston.transports.Console({ stderrLevels: ['error', 'warn', 'info', 'http', 'verbose', 'debug', 'silly'] })],
  })
}

/** A logger that drops everything, for tests and tools that must stay quiet. */
export function silentLogger(): Logger {
  return winston.createLogger({ silent: true, transports: [new winston.transports.Console({ silent: true })] })
}

/**
 * Logs at most one line per `intervalMs` per key and counts what it held back, so an outage that
 * fails every request produces a line a minute, not a line a request.
 */
export class RateLimitedLog {
  private readonly last = new Map<string, { at: number; suppressed: number }>()

  constructor(
    private readonly log: Logger,
    private readonly intervalMs = 60_000,
    private readonly now = Date.now,
  ) {}

  warn(key: string, message: string, meta: Record<string, unknown> = {}): void {
    const t = this.now()
    const seen = this.last.get(key)
    if (seen && t - seen.at < this.intervalMs) {
      seen.suppressed++
      return
    }
    const suppressed = seen?.suppressed ?? 0
    this.last.set(key, { at: t, suppressed: 0 })
    this.log.warn(message, suppressed > 0 ? { ...meta, suppressed_since_last: suppressed } : meta)
  }
}
