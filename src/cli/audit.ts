import type { Command } from 'commander'
import { type ConfigBlocks, loadConfigBlocks } from '../config/load'
import { ConfigError, describeError } from '../errors'
import { DECISIONS } from '../pipeline/exchange'
import {
  AuditQueryError,
  DEFAULT_LIMIT,
  type AuditFilter,
  type FilterOptions,
  type GroupColumn,
  buildFilter,
  parseGroupColumns,
  parseLimit,
} from '../audit/query'
import { FORMATS, type Format, Output, defaultFormat, writeEntries, writeSummary } from '../audit/query-format'
import { MAX_LINE_BYTES, MAX_SUMMARY_GROUPS, type SkippedLines, jsonlRows, jsonlSummary } from '../audit/query-jsonl'
import { AuditDatabase } from '../audit/query-postgres'

export interface AuditOptions extends FilterOptions {
  readonly config: string
  readonly file?: string
  readonly limit?: string
  readonly format?: string
  readonly summary?: boolean
  readonly by?: string
}

export interface AuditIo {
  readonly stdout: NodeJS.WritableStream & { isTTY?: boolean }
  readonly stderr: NodeJS.WritableStream
  readonly now: () => number
}

/** One run's question and where its answer goes, whatever the source. */
interface Query {
  readonly filter: AuditFilter
  readonly limit: number
  readonly format: Format
  readonly summary: boolean
  readonly by: readonly GroupColumn[]
  readonly out: Output
  /** A line on stderr. */
  readonly say: (line: string) => void
}

/** Where the entries are read from. */
type Source = { readonly kind: 'jsonl'; readonly path: string } | { readonly kind: 'postgres'; readonly dsn: string }

/** `wardline audit`, registered by main.ts. */
export function registerAuditCommand(program: Command): void {
  program
    .command('audit')
    .description(
      'query the audit trail (Postgres audit_entries with features.postgres_storage, else the JSONL file at audit.output); exit 0 with or without rows, 1 on bad input or an unreadable source',
    )
    .option('-c, --config <file>', 'configuration file (says where the trail is)', 'wardline.yaml')
    .option('--file <path>', 'read this JSONL audit file instead (a rotated one; .gz is unpacked); the config is not read')
    .option('--identity <glob>', 'identities matching this glob (* is the only wildcard, as in policy rules)')
    .option('--tenant <glob>', 'tenants matching this glob')
    .option('--tool <glob>', 'tools (the target: tool, prompt or resource URI) matching this glob')
    .option('--server <glob>', 'requests routed to a server (servers:) matching this glob; entries without a server never match')
    .option('--decision <list>', `one or more of ${DECISIONS.join(', ')}, comma-separated`)
    .option(
      '--reason-code <list>',
      'entries with one of these reason codes, comma-separated (policy.denied, budget.exceeded…: docs/gateway.md, "Reason codes"); an ordinary allow has none',
    )
    .option(
      '--since <time>',
      'entries at or after: 90s, 30m, 1h, 7d back from now; today or yesterday (from 00:00 UTC); or an ISO 8601 time (2026-12-01T09:30:00Z; a date alone is 00:00 UTC)',
    )
    .option('--until <time>', 'entries before: the same forms as --since')
    .option('--limit <n>', `the newest N matching rows (or summary groups), printed oldest first; 0: all, streamed`, String(DEFAULT_LIMIT))
    .option('--format <format>', `${FORMATS.join(', ')} (default: table on a terminal, jsonl otherwise)`)
    .option('--summary', 'counts by identity, tenant and tool × decision instead of entries')
    .option('--by <columns>', 'the summary grouping: identity, tenant, tool (comma-separated)', 'identity,tenant,tool')
    .action(async (opts: AuditOptions) => {
      process.exitCode = await auditCommand(opts, { stdout: process.stdout, stderr: process.stderr, now: Date.now })
    })
}

/**
 * Runs the command and returns its exit status: 0 when the query ran (with or without rows), 1 on bad
 * input, a bad config, or a source that cannot be read. A reader that goes away (`| head`) ends it
 * quietly with 0.
 */
export async function auditCommand(opts: AuditOptions, io: AuditIo): Promise<number> {
  const say = (line: string): void => void io.stderr.write(`${line}\n`)
  // `wardline audit | head`: head exits, the next write fails with EPIPE. The answer was wanted only
  // that far: stop at once, quietly, as cat and grep do.
  io.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(0)
    say(`wardline audit: cannot write the output: ${describeError(err)}`)
    process.exit(1)
  })
  try {
    const format = parseFormat(opts.format, io.stdout.isTTY)
    const filter = buildFilter(opts, io.now())
    const limit = parseLimit(opts.limit ?? String(DEFAULT_LIMIT))
    const by = parseGroupColumns(opts.by ?? 'identity,tenant,tool')
    const source = opts.file !== undefined ? ({ kind: 'jsonl', path: opts.file } as const) : sourceOf(readConfig(opts.config), opts.config)
    const query: Query = { filter, limit, format, summary: opts.summary === true, by, out: new Output(io.stdout), say }
    if (source.kind === 'jsonl') await fromJsonl(source.path, query)
    else await fromPostgres(source.dsn, opts.config, query)
    return 0
  } catch (err) {
    if (err instanceof ConfigError) {
      say(`wardline audit: ${opts.config}: ${err.problems.length} problem${err.problems.length === 1 ? '' : 's'}`)
      for (const p of err.problems) say(`  ${p}`)
    } else if (err instanceof AuditQueryError) {
      say(`wardline audit: ${err.message}`)
    } else {
      say(`wardline audit: ${describeError(err)}`)
    }
    return 1
  }
}

function parseFormat(text: string | undefined, isTTY: boolean | undefined): Format {
  if (text === undefined) return defaultFormat(isTTY)
  if (!(FORMATS as readonly string[]).includes(text)) throw new AuditQueryError(`--format ${text}: must be one of ${FORMATS.join(', ')}`)
  return text as Format
}

/**
 * Only the blocks that say where the trail is, read and validated as `serve` reads them: a shell that
 * queries the trail need not hold the JWT secret's variable (or any other block's).
 */
function readConfig(path: string): Pick<ConfigBlocks, 'features' | 'audit' | 'postgres'> {
  return loadConfigBlocks(path, ['features', 'audit', 'postgres'])
}

/** The table with Postgres storage (where every replica writes), else the JSONL file. */
function sourceOf(config: Pick<ConfigBlocks, 'features' | 'audit' | 'postgres'>, path: string): Source {
  if (config.features.postgresStorage) {
    if (config.postgres === null) throw new AuditQueryError(`${path}: features.postgres_storage is true but postgres.dsn is not set`)
    return { kind: 'postgres', dsn: config.postgres.dsn }
  }
  if (config.audit.output === null) {
    throw new AuditQueryError(
      `${path}: audit.output is null and features.postgres_storage is false: this configuration keeps no audit trail`,
    )
  }
  if (config.audit.output === 'stdout') {
    throw new AuditQueryError(
      `${path}: audit.output is stdout, so the trail went wherever the gateway's stdout goes (a container log, journald): save it to a file and pass --file, or set audit.output to a file path`,
    )
  }
  return { kind: 'jsonl', path: config.audit.output }
}

async function fromJsonl(path: string, { filter, limit, format, summary, by, out, say }: Query): Promise<void> {
  const skipped: SkippedLines = { malformed: 0, tooLong: 0 }
  try {
    if (summary) {
      const result = await jsonlSummary(path, filter, by, limit, skipped)
      const n = await writeSummary(iterate(result.rows), by, filter.decisions ?? DECISIONS, format, out)
      if (result.folded) {
        say(`wardline audit: more than ${MAX_SUMMARY_GROUPS} groups: the rest are counted together as *other*; narrow the filters or --by`)
      }
      noteSummary(n, result.groups, format, say)
    } else {
      const found = { more: false }
      const n = await writeEntries(jsonlRows(path, filter, limit, skipped, found), format, out)
      noteEntries(n, found.more, limit, format, say)
    }
  } finally {
    if (skipped.malformed > 0 || skipped.tooLong > 0) {
      const parts = []
      if (skipped.malformed > 0) parts.push(`${skipped.malformed} line${skipped.malformed === 1 ? '' : 's'} that are not audit entries`)
      if (skipped.tooLong > 0)
        parts.push(`${skipped.tooLong} line${skipped.tooLong === 1 ? '' : 's'} over ${MAX_LINE_BYTES / 1024 / 1024} MiB`)
      say(`wardline audit: ${path}: skipped ${parts.join(' and ')}`)
    }
  }
}

async function fromPostgres(dsn: string, configPath: string, { filter, limit, format, summary, by, out, say }: Query): Promise<void> {
  const db = await AuditDatabase.open(dsn, configPath, say)
  try {
    if (summary) {
      const found = { groups: 0 }
      const n = await writeSummary(db.summary(filter, by, limit, found), by, filter.decisions ?? DECISIONS, format, out)
      noteSummary(n, found.groups, format, say)
    } else {
      const found = { more: false }
      const n = await writeEntries(db.entries(filter, limit, found), format, out)
      noteEntries(n, found.more, limit, format, say)
    }
  } finally {
    await db.close()
  }
}

function iterate<T>(items: readonly T[]): AsyncIterable<T> {
  return (async function* () {
    await Promise.resolve()
    yield* items
  })()
}

/** On stderr, so a pipe carries rows only. */
function noteEntries(n: number, more: boolean, limit: number, format: Format, say: (line: string) => void): void {
  if (n === 0 && format === 'table') say('no matching audit entries')
  if (more)
    say(
      `wardline audit: showing the newest ${limit} matching entries; more match (--limit 0 prints all of them, or narrow --since/--until)`,
    )
}

function noteSummary(n: number, groups: number, format: Format, say: (line: string) => void): void {
  if (n === 0 && format === 'table') say('no matching audit entries')
  if (groups > n) say(`wardline audit: showing the ${n} largest of ${groups} groups (--limit 0 prints all of them)`)
}
