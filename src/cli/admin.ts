import { readFileSync } from 'node:fs'
import { type Command, Option } from 'commander'
import type { BucketReport } from '../admin/budgets'
import { AdminClientError, adminBaseUrl, callAdmin } from '../admin/client'
import { type Revocation, reasonProblem } from '../auth/revocations'
import { loadConfigBlocks } from '../config/load'
import type { AdminConfig } from '../config/types'
import { ConfigError, describeError } from '../errors'
import { escapeControls, escapeJsonText } from '../escape'
import { terminalSafe, terminalTable } from '../terminal-table'

/**
 * `wardline revoke` and `wardline budget show|reset`: thin wrappers over the admin API (src/admin/).
 * They read only the admin: block of the config (its listen and token), call the running gateway,
 * print a table (JSON with --json), and exit 0, or 1 with one line saying what went wrong. Identities,
 * tenants, tool names and reasons come from callers and from rows anyone with SQL access wrote: every
 * value printed goes through terminal-table.ts (tables, lines) or escapeJsonText (--json).
 */
export function registerAdminCommands(program: Command): void {
  program
    .command('revoke')
    .description(
      "revoke an identity, one token (--jti) or an identity's tokens issued before a time (401 on every replica), list revocations, or lift one; needs admin.listen",
    )
    .option('-c, --config <file>', 'configuration file (its admin: block)', 'wardline.yaml')
    .option('--identity <identity>', 'the identity to revoke or lift ("*": every identity of the tenant); needs --tenant')
    .option('--tenant <tenant>', 'its tenant, always required with --identity ("--tenant default": tokens without a tenant claim)')
    .option('--jti <jti>', 'revoke or lift one token by its jti claim (wardline token prints it), whoever holds it')
    .option(
      '--issued-before [time]',
      'with --identity: refuse only its tokens whose iat is before this ISO 8601 time or "now" (newer tokens work); with --remove, no time',
    )
    .option('--until <when>', 'when the revocation ends: a duration (90s, 30m, 1h, 7d) or an ISO 8601 time; default: until lifted')
    .option('--reason <text>', 'a note kept with the revocation')
    .option('--list', 'list the revocations in force')
    .option('--remove', 'lift the revocation of --identity in --tenant (its issued-before one with --issued-before), or of --jti')
    .option('--json', 'print the API answer as JSON')
    .addOption(timeoutOption())
    .action((opts: RevokeOptions) => run(opts.config, opts, (admin) => revoke(admin, opts)))

  const budget = program.command('budget').description('show or reset budget buckets of the running gateway; needs admin.listen')
  for (const action of ['show', 'reset'] as const) {
    budget
      .command(action)
      .description(
        action === 'show'
          ? 'every bucket that applies: limit, used, remaining, reset (no filter: every tenant, tool and server bucket)'
          : 'reset the buckets `budget show` lists for the same filters (memory: this replica; Postgres: every replica)',
      )
      .option('-c, --config <file>', 'configuration file (its admin: block)', 'wardline.yaml')
      .option('--identity <identity>', 'an identity: its identity and repeat buckets, and its tenant bucket')
      .option('--tenant <tenant>', 'a tenant (the identity’s, default "default")')
      .option('--tool <tool>', 'a tool listed under budget.tools (with servers: <server>/<tool>, or a tool name for every server)')
      .option('--server <server>', 'with servers: a server, its budget.servers bucket and its tools’ buckets')
      .addOption(new Option('--kind <kind>', 'only buckets of this kind').choices(['identity', 'tenant', 'tool', 'server', 'repeat']))
      .option('--json', 'print the API answer as JSON')
      .addOption(timeoutOption())
      .action((opts: BudgetOptions) => run(opts.config, opts, (admin) => budgets(admin, action, opts)))
  }
}

interface CommonOptions {
  readonly config: string
  readonly json?: boolean
  readonly timeout: string
}

interface RevokeOptions extends CommonOptions {
  readonly identity?: string
  readonly tenant?: string
  readonly jti?: string
  readonly issuedBefore?: string | true
  readonly until?: string
  readonly reason?: string
  readonly list?: boolean
  readonly remove?: boolean
}

interface BudgetOptions extends CommonOptions {
  readonly identity?: string
  readonly tenant?: string
  readonly tool?: string
  readonly server?: string
  readonly kind?: string
}

/** What a command needs to call the API, read from the config. */
interface AdminTarget {
  readonly baseUrl: string
  readonly token: string
  readonly timeoutMs: number
  readonly json: boolean
  /** admin.tls.cert_file's PEM: the certificate the CLI trusts as the admin API's (admin/client.ts). */
  readonly trust?: string
}

function timeoutOption(): Option {
  return new Option('--timeout <seconds>', 'how long to wait for the gateway').default('10')
}

/** A refusal the user can fix from the command line: printed as it is, exit 1. */
class UsageError extends Error {}

/** admin.tls.cert_file, which the CLI must read to know the certificate it will be shown. */
function readTrust(path: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch (err) {
    throw new UsageError(`admin.tls.cert_file: ${path} cannot be read (${(err as NodeJS.ErrnoException).code ?? describeError(err)})`)
  }
}

async function run(configPath: string, opts: CommonOptions, body: (target: AdminTarget) => Promise<string>): Promise<void> {
  try {
    const timeout = Number(opts.timeout)
    if (!Number.isFinite(timeout) || timeout <= 0 || timeout > 600)
      throw new UsageError('--timeout must be a number of seconds between 0 and 600')
    let admin: AdminConfig | null
    try {
      admin = loadConfigBlocks(configPath, ['admin']).admin
    } catch (err) {
      if (err instanceof ConfigError) throw new UsageError(`${configPath}: ${err.problems.join('; ')}`)
      throw err
    }
    if (admin === null) throw new UsageError(`${configPath}: the admin API is off (admin.listen is not set)`)
    if (admin.listen.port === 0) {
      // Port 0 is a fresh port each start: only the running gateway knows it (its log line "admin API listening").
      throw new UsageError(`${configPath}: admin.listen has port 0, so the CLI cannot know the admin API's port: set a fixed port`)
    }
    const out = await body({
      baseUrl: adminBaseUrl(admin),
      token: admin.token,
      timeoutMs: timeout * 1000,
      json: opts.json === true,
      ...(admin.tls === null ? {} : { trust: readTrust(admin.tls.certFile) }),
    })
    process.stdout.write(out.endsWith('\n') ? out : `${out}\n`)
  } catch (err) {
    const message = err instanceof UsageError || err instanceof AdminClientError ? err.message : describeError(err)
    // The API's message may quote what was sent (an identity): one line, nothing raw.
    process.stderr.write(`wardline: ${escapeControls(message)}\n`)
    process.exitCode = 1
  }
}

/** Said when --tenant is missing: a gateway with one tenant has it as `default`, and the CLI will not guess. */
const TENANT_REQUIRED =
  '--tenant is required with --identity (on a single-tenant gateway, and for tokens without a tenant claim, it is --tenant default)'

async function revoke(target: AdminTarget, opts: RevokeOptions): Promise<string> {
  const call = (method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown): Promise<unknown> =>
    callAdmin(target.baseUrl, target.token, { method, path, body, timeoutMs: target.timeoutMs, trust: target.trust })
  if (opts.list && opts.remove) throw new UsageError('--list and --remove cannot be used together')
  if (opts.list) {
    const extra = (['identity', 'tenant', 'jti', 'issuedBefore'] as const).find((k) => opts[k] !== undefined)
    if (extra !== undefined) throw new UsageError(`--list lists every revocation: leave out ${flagOf(extra)}`)
    const answer = (await call('GET', '/revocations')) as { revocations: Revocation[] }
    if (target.json) return json(answer)
    if (answer.revocations.length === 0) return 'no revocations in force'
    return terminalTable(
      ['KIND', 'TENANT', 'IDENTITY', 'JTI', 'ISSUED BEFORE', 'UNTIL', 'SINCE', 'REASON'],
      answer.revocations.map((r) => [
        r.kind,
        r.kind === 'jti' ? '-' : r.tenant,
        r.kind === 'jti' ? '-' : r.identity,
        r.kind === 'jti' ? r.jti : '-',
        r.kind === 'issued_before' ? r.issued_before : '-',
        r.until ?? 'until lifted',
        r.created_at,
        r.reason ?? '',
      ]),
    )
  }
  const what = revocationTarget(opts)
  if (opts.remove) {
    if (opts.until !== undefined || opts.reason !== undefined)
      throw new UsageError('--remove lifts a revocation: leave out --until and --reason')
    if (typeof opts.issuedBefore === 'string') throw new UsageError('--remove --issued-before takes no time: it lifts the one there is')
    const query = new URLSearchParams(
      what.kind === 'jti' ? { jti: what.jti } : { identity: what.identity, tenant: what.tenant, kind: what.kind },
    )
    const answer = await call('DELETE', `/revocations?${query.toString()}`)
    return target.json ? json(answer) : `lifted the ${what.description}`
  }
  // Checked here too, so a bad note is refused before anything is sent, with the API's own words.
  const problem = opts.reason === undefined ? null : reasonProblem(opts.reason)
  if (problem !== null) throw new UsageError(`--reason: ${problem}`)
  const nowMs = Date.now()
  const until = opts.until === undefined ? null : untilTime(opts.until, nowMs)
  const body: Record<string, unknown> = what.kind === 'jti' ? { jti: what.jti } : { identity: what.identity, tenant: what.tenant }
  if (what.kind === 'issued_before') {
    if (opts.issuedBefore === true) throw new UsageError('--issued-before needs a time: an ISO 8601 time or "now"')
    body.issued_before = issuedBeforeTime(opts.issuedBefore as string, nowMs)
  }
  const answer = (await call('POST', '/revocations', {
    ...body,
    until,
    ...(opts.reason === undefined ? {} : { reason: opts.reason }),
  })) as { revocation: Revocation }
  if (target.json) return json(answer)
  const r = answer.revocation
  const end = r.until === null ? 'until lifted' : `until ${r.until}`
  if (r.kind === 'jti') return `revoked token jti ${terminalSafe(r.jti)} ${end}`
  const who = `${terminalSafe(r.identity)} in tenant ${terminalSafe(r.tenant)}`
  if (r.kind === 'issued_before') return `revoked the tokens of ${who} issued before ${r.issued_before} ${end}`
  return `revoked ${who} ${end}`
}

/** What the command names; `description` (terminal-safe) is for `lifted the …`. */
type RevokeTarget =
  | { readonly kind: 'jti'; readonly jti: string; readonly description: string }
  | { readonly kind: 'identity' | 'issued_before'; readonly identity: string; readonly tenant: string; readonly description: string }

/** What --identity/--tenant/--jti/--issued-before name; a missing --tenant is an error, never `default`. */
function revocationTarget(opts: RevokeOptions): RevokeTarget {
  if (opts.jti !== undefined) {
    const extra = (['identity', 'tenant', 'issuedBefore'] as const).find((k) => opts[k] !== undefined)
    if (extra !== undefined) throw new UsageError(`--jti names one token: leave out ${flagOf(extra)}`)
    return { kind: 'jti', jti: opts.jti, description: `revocation of token jti ${terminalSafe(opts.jti)}` }
  }
  if (opts.identity === undefined) throw new UsageError('--identity (with --tenant) or --jti is required (or --list)')
  if (opts.tenant === undefined) throw new UsageError(TENANT_REQUIRED)
  const who = `${terminalSafe(opts.identity)} in tenant ${terminalSafe(opts.tenant)}`
  return opts.issuedBefore === undefined
    ? { kind: 'identity', identity: opts.identity, tenant: opts.tenant, description: `revocation of ${who}` }
    : { kind: 'issued_before', identity: opts.identity, tenant: opts.tenant, description: `issued-before revocation of ${who}` }
}

function flagOf(option: 'identity' | 'tenant' | 'jti' | 'issuedBefore'): string {
  return option === 'issuedBefore' ? '--issued-before' : `--${option}`
}

/**
 * `--issued-before`: an ISO 8601 time passed on as it is (the API checks it), or `now`: this machine's
 * clock, down to the whole second. A token's `iat` has whole seconds, so a replacement minted right after
 * the revocation, in the same second, carries an `iat` equal to that second: the exact time would refuse
 * it, the whole second keeps it (and refuses every token issued in an earlier second).
 */
export function issuedBeforeTime(text: string, nowMs: number): string {
  if (text === 'now') return new Date(Math.floor(nowMs / 1000) * 1000).toISOString()
  if (/^\d{4}-\d{2}-\d{2}T/.test(text)) return text
  throw new UsageError(`--issued-before must be an ISO 8601 time (2026-12-01T18:00:00Z) or "now", not ${JSON.stringify(text)}`)
}

const UNITS: Readonly<Record<string, number>> = { s: 1, m: 60, h: 3600, d: 86_400 }

/** `--until`: a duration from now (90s, 30m, 1h, 7d), or an ISO 8601 time passed on as it is. */
export function untilTime(text: string, nowMs: number): string {
  const duration = /^(\d+)([smhd])$/.exec(text)
  if (duration !== null) {
    const seconds = Number(duration[1]) * UNITS[duration[2]]
    if (seconds <= 0) throw new UsageError('--until must be a duration above zero')
    const until = new Date(nowMs + seconds * 1000)
    // Past year 275760 a Date is invalid (toISOString would throw "Invalid time value").
    if (Number.isNaN(until.getTime()) || until.getUTCFullYear() > 9999) throw new UsageError(`--until ${text} ends after the year 9999`)
    return until.toISOString()
  }
  if (/^\d{4}-\d{2}-\d{2}T/.test(text)) return text // the API checks it, with a precise message
  throw new UsageError(
    `--until must be a duration (90s, 30m, 1h, 7d) or an ISO 8601 time (2026-12-01T18:00:00Z), not ${JSON.stringify(text)}`,
  )
}

async function budgets(target: AdminTarget, action: 'show' | 'reset', opts: BudgetOptions): Promise<string> {
  const query = new URLSearchParams()
  for (const key of ['identity', 'tenant', 'tool', 'server', 'kind'] as const) if (opts[key] !== undefined) query.set(key, opts[key])
  if (action === 'reset' && query.size === 0)
    throw new UsageError('budget reset needs --identity, --tenant, --tool or --server (resetting every bucket is not offered)')
  const path = `/budgets${query.size === 0 ? '' : `?${query.toString()}`}`
  const answer = (await callAdmin(target.baseUrl, target.token, {
    method: action === 'show' ? 'GET' : 'DELETE',
    path,
    timeoutMs: target.timeoutMs,
    trust: target.trust,
  })) as { scope: string; tenant?: string | null; buckets?: BucketReport[]; reset?: BucketReport[]; notes: string[] }
  if (target.json) return json(answer)
  const rows = (action === 'show' ? answer.buckets : answer.reset) ?? []
  // Which tenant was read: `alice` alone is tenant default's alice, and the header says so.
  const where =
    answer.tenant === null || answer.tenant === undefined ? answer.scope : `${answer.scope}, tenant ${terminalSafe(answer.tenant)}`
  const lines: string[] = []
  if (action === 'reset')
    lines.push(rows.length === 0 ? `nothing to reset (${where})` : `reset ${rows.length} bucket${rows.length === 1 ? '' : 's'} (${where}):`)
  else lines.push(`budgets (${where}):`)
  if (opts.identity !== undefined && opts.tenant === undefined) {
    lines.push(`note: no --tenant given: read tenant ${terminalSafe(answer.tenant ?? 'default')} (tokens without a tenant claim)`)
  }
  if (rows.length > 0 && action === 'show') {
    lines.push(
      terminalTable(
        ['KIND', 'NAME', 'TENANT', 'WINDOW', 'LIMIT', 'USED', 'REMAINING', 'RESETS IN', 'RESETS AT'],
        rows.map((b) => [
          ...describeBucket(b),
          String(b.used),
          String(b.remaining),
          b.reset_seconds === null ? '-' : `${Math.ceil(b.reset_seconds)}s`,
          b.reset_at ?? '-',
        ]),
      ),
    )
  } else if (rows.length > 0) {
    // What a bucket had used before it was reset; its window is gone, so no reset time.
    lines.push(
      terminalTable(
        ['KIND', 'NAME', 'TENANT', 'WINDOW', 'LIMIT', 'USED BEFORE'],
        rows.map((b) => [...describeBucket(b), String(b.used)]),
      ),
    )
  } else if (action === 'show') lines.push('no buckets match')
  for (const note of answer.notes) lines.push(`note: ${terminalSafe(note)}`)
  return lines.join('\n')
}

function describeBucket(b: BucketReport): string[] {
  const kind = b.kind === 'repeat' && b.call !== undefined ? `repeat ${b.call.slice(0, 8)}` : b.kind
  // A tool bucket of one server is named as its budget.tools key: the same tool on two servers is two rows.
  const name = b.kind === 'tool' && b.server !== undefined ? `${b.server}/${b.name}` : b.name
  return [kind, name, b.tenant ?? '', `${b.window_seconds}s`, String(b.limit)]
}

/** The API's answer as JSON, with nothing a terminal would act on left raw in its strings. */
function json(answer: unknown): string {
  return escapeJsonText(JSON.stringify(answer))
}
