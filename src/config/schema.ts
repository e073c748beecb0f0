import { readConfig } from './load'
import { readPolicy } from './policy'
import { type Node, Reader, join } from './reader'

/**
 * The JSON Schema of wardline.yaml (and of a policy file), recorded from the readers check-config
 * runs, so the two cannot disagree about a key, a type, a bound, a choice or a default.
 *
 * How: a Recorder is a Reader whose every call (object, map, list, string, int, number, bool, oneOf…)
 * records what it accepts at its key path instead of checking a value. The readers run unchanged on a
 * stand-in tree in which every allowed key is present; a list gets one item and a map one entry, so
 * their item readers run too. Branches are explored by running again: once with each key left out
 * (`limits:` or the `requests_per_window` pair; an inline `policy:` or `policy_file`), once with each
 * choice of every oneOf and each value of every bool (auth.mode: header). What the schema says beyond
 * the calls themselves is observed, not declared:
 * - a key is *required* when leaving it out makes the readers note a problem at it, under it or at
 *   its parent, in every explored run that reads its parent (upstream, policy.default, a limit pair);
 * - a key may be *null* when `key:` with no value reads exactly like the key left out in some run
 *   (the Reader treats both as "not given"; `policy_file:` with nothing after it does not);
 * - a fallback is a *default* only when it is what a left-out key reads as and it does not change when
 *   other values do (a tenant's window inherits the top-level one: no default is shown for it).
 * Cross-field rules (one JWT key source, audit.retention_days needs Postgres) stay code: check-config
 * says them, the schema does not. A key added with the ordinary Reader calls appears here by itself.
 */

/** JSON Schema draft-07: what yaml-language-server (VS Code's YAML extension, JetBrains, Neovim) supports. */
const DRAFT = 'http://json-schema.org/draft-07/schema#'

/** Stands for "a value the operator wrote" wherever a reader looks at one; readers only test its presence. */
const PRESENT: object = Object.freeze({})

/** The one entry name a map (budget.tenants, budget.tools) is read with: its entries' schema lives there. */
const ENTRY = '<name>'

/** Where relative paths would resolve; nothing is read from it (every string reads as its fallback). */
const NOWHERE = '/nonexistent-wardline-schema'

/** `${VAR}` or `${VAR:-default}` somewhere in a string (env.ts). */
// Not after a `$`: env.ts reads `$${` as an escaped, literal `${`.
const ENV_REFERENCE = '(?<!\\$)\\$\\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\\}'

type Call =
  | { kind: 'object'; allowed: readonly string[] }
  | { kind: 'map' }
  | { kind: 'list' }
  | { kind: 'string'; fallback: string; nonEmpty: boolean }
  | { kind: 'optionalString' }
  | { kind: 'stringOrList' }
  | { kind: 'bool'; fallback: boolean }
  | { kind: 'int'; fallback: number; min: number; max: number }
  | { kind: 'number'; fallback: number; min: number; max: number; exclusiveMin: boolean }
  | { kind: 'oneOf'; fallback: string; choices: readonly string[] }

/** One way of running the readers over the stand-in tree. */
interface Probe {
  /** Key paths left out. */
  readonly absent: readonly string[]
  /** A key path given as null (`key:` with nothing after it). */
  readonly blank?: string
  /** A oneOf or bool at this path answers with this value instead of its fallback. */
  readonly choose?: readonly [string, string | boolean]
  /** Every number and string answers with a value other than its fallback (finds inherited defaults). */
  readonly perturb?: boolean
  /** The list at this path has this many items (otherwise one). */
  readonly items?: readonly [string, number]
}

interface Run {
  readonly calls: ReadonlyMap<string, Call>
  readonly notes: readonly string[]
  readonly present: ReadonlySet<string>
}

class Recorder extends Reader {
  readonly calls = new Map<string, Call>()
  readonly notePaths: string[] = []
  /** Objects, maps and lists read with a value (not left out): their keys were really looked at. */
  readonly present = new Set<string>()

  constructor(private readonly probe: Probe) {
    super()
  }

  override note(path: string, problem: string): void {
    this.notePaths.push(path)
    super.note(path, problem)
  }

  override object(value: unknown, path: string, allowed: readonly string[]): Node {
    this.record(path, { kind: 'object', allowed })
    if (value === undefined || value === null) return {}
    this.present.add(path)
    const node: Node = {}
    for (const key of allowed) {
      const child = this.valueAt(join(path, key))
      if (child !== undefined) node[key] = child
    }
    return node
  }

  override map(value: unknown, path: string): Node {
    this.record(path, { kind: 'map' })
    if (value === undefined || value === null) return {}
    this.present.add(path)
    const child = this.valueAt(join(path, ENTRY))
    return child === undefined ? {} : { [ENTRY]: child }
  }

  override list(value: unknown, path: string): unknown[] {
    this.record(path, { kind: 'list' })
    if (value === undefined || value === null) return []
    this.present.add(path)
    const n = this.probe.items?.[0] === path ? this.probe.items[1] : 1
    return Array.from({ length: n }, (_, i) => this.valueAt(join(path, i)))
  }

  override string(_value: unknown, path: string, fallback: string, opts: { nonEmpty?: boolean } = {}): string {
    this.record(path, { kind: 'string', fallback, nonEmpty: opts.nonEmpty === true })
    return this.probe.perturb && fallback !== '' ? `${fallback}~` : fallback
  }

  override optionalString(_value: unknown, path: string): string | null {
    this.record(path, { kind: 'optionalString' })
    return null
  }

  override stringOrList(_value: unknown, path: string): string[] {
    this.record(path, { kind: 'stringOrList' })
    return []
  }

  override bool(_value: unknown, path: string, fallback: boolean): boolean {
    this.record(path, { kind: 'bool', fallback })
    return this.probe.choose?.[0] === path ? (this.probe.choose[1] as boolean) : fallback
  }

  override int(_value: unknown, path: string, fallback: number, min: number, max: number): number {
    this.record(path, { kind: 'int', fallback, min, max })
    return this.probe.perturb ? (fallback !== max ? max : min) : fallback
  }

  override number(_value: unknown, path: string, fallback: number, min: number, max: number, exclusiveMin = false): number {
    this.record(path, { kind: 'number', fallback, min, max, exclusiveMin })
    return this.probe.perturb ? (fallback !== max ? max : min) : fallback
  }

  override oneOf<T extends string>(_value: unknown, path: string, choices: readonly T[], fallback: T): T {
    this.record(path, { kind: 'oneOf', fallback, choices })
    return this.probe.choose?.[0] === path ? (this.probe.choose[1] as T) : fallback
  }

  private valueAt(path: string): unknown {
    if (this.probe.absent.includes(path)) return undefined
    // An empty list is a real one: a reader may tell `[]` from a value that is not a list (budget.limits).
    if (this.probe.items?.[0] === path && this.probe.items[1] === 0) return []
    return this.probe.blank === path ? null : PRESENT
  }

  private record(path: string, call: Call): void {
    if (!this.calls.has(path)) this.calls.set(path, call)
  }
}

/** What is read: the readers check-config runs, started on the stand-in tree. */
type Entry = (r: Reader) => void

const CONFIG_ENTRY: Entry = (r) => void readConfig(r, PRESENT, NOWHERE)
/** A policy file is read like the inline block (policy.ts), so the inline block's recording is its schema. */
const POLICY_ENTRY: Entry = (r) => void readPolicy(r, PRESENT, undefined, (p) => p)

function run(entry: Entry, probe: Probe): Run {
  const r = new Recorder(probe)
  entry(r)
  return { calls: r.calls, notes: r.notePaths, present: r.present }
}

interface Recording {
  /** Every call seen at each path, one per kind (a type-driven branch could read a key two ways). */
  readonly calls: Map<string, Call[]>
  /** Object key path → its parent object's path. */
  readonly keys: Map<string, string>
  readonly required: Set<string>
  /** List path → how many items the readers accept (budget.limits: 1 to 8), when they bound it. */
  readonly itemBounds: Map<string, { minItems?: number; maxItems?: number }>
  /** Object path → keys each needing the others, that may all be left out together (admin: listen and token). */
  readonly together: Map<string, string[]>
  readonly nullable: Set<string>
  /** Path → the default a left-out key reads as. */
  readonly defaults: Map<string, unknown>
}

function record(entry: Entry): Recording {
  const calls = new Map<string, Call[]>()
  const keys = new Map<string, string>()

  // Explore until no run reads a path no earlier run read: each new key, oneOf or bool brings runs.
  const contexts: Array<{ probe: Probe; run: Run }> = []
  const queued = new Set<string>()
  const pending: Probe[] = []
  const enqueue = (probe: Probe): void => {
    const id = JSON.stringify(probe)
    if (queued.has(id)) return
    queued.add(id)
    pending.push(probe)
  }
  enqueue({ absent: [] })
  while (pending.length > 0) {
    const probe = pending.shift() as Probe
    const result = run(entry, probe)
    contexts.push({ probe, run: result })
    for (const [path, call] of result.calls) {
      const seen = calls.get(path) ?? []
      if (!seen.some((c) => c.kind === call.kind)) calls.set(path, [...seen, call])
      if (call.kind === 'object') {
        for (const key of call.allowed) keys.set(join(path, key), path)
        for (const key of call.allowed) enqueue({ absent: [join(path, key)] })
      }
      if (call.kind === 'oneOf') for (const c of call.choices) if (c !== call.fallback) enqueue({ absent: [], choose: [path, c] })
      if (call.kind === 'bool') enqueue({ absent: [], choose: [path, !call.fallback] })
    }
  }

  const perturbedRuns = new Map<Probe, Run>()
  const perturbedRun = (probe: Probe): Run => {
    let result = perturbedRuns.get(probe)
    if (result === undefined) perturbedRuns.set(probe, (result = run(entry, { ...probe, perturb: true })))
    return result
  }
  const required = new Set<string>()
  const nullable = new Set<string>()
  const defaults = new Map<string, unknown>()
  for (const [key, parent] of keys) {
    // The runs in which this key's parent is there, except those leaving out a sibling (siblings are
    // often required together, and one note covers both: "must set calls and window_seconds"), and
    // leaving out anything but a sibling of one of its parents (a run per key would take seconds).
    const relevant = contexts.filter(
      ({ probe, run: ctx }) =>
        ctx.present.has(parent) && probe.absent.every((a) => keys.get(a) !== parent && isParent(keys.get(a) ?? '', parent)),
    )
    let alwaysNoted = relevant.length > 0
    let blankAsAbsent = false
    for (const { probe, run: ctx } of relevant) {
      // Not memoized: thousands of runs kept alive cost more in garbage collection than rerunning.
      const absent = run(entry, { ...probe, absent: [...probe.absent, key] })
      if (!notesMore(absent.notes, ctx.notes, (p) => p === parent || within(p, key))) alwaysNoted = false
      if (!blankAsAbsent) blankAsAbsent = sameNotes(run(entry, { ...probe, blank: key }).notes, absent.notes)
      if (!alwaysNoted && blankAsAbsent) break
    }
    if (alwaysNoted) required.add(key)
    else if (blankAsAbsent) nullable.add(key)

    // A default is what the key reads as when left out, the same whatever other keys say.
    const first = relevant[0]
    const call = first?.run.calls.get(key)
    if (alwaysNoted || first === undefined || call === undefined || !('fallback' in call) || call.fallback === '') continue
    const leftOut = run(entry, { ...first.probe, absent: [...first.probe.absent, key] }).calls.get(key)
    const perturbed = perturbedRun(first.probe).calls.get(key)
    const same = (c: Call | undefined): boolean => c !== undefined && 'fallback' in c && c.fallback === call.fallback
    if (same(leftOut) && same(perturbed)) defaults.set(key, call.fallback)
  }
  // Keys found required with a sibling present may be fine all left out (admin: neither listen nor
  // token is "off"): a schema requiring them would refuse what check-config accepts.
  const together = new Map<string, string[]>()
  for (const parent of new Set([...required].map((k) => keys.get(k) as string))) {
    const group = [...required].filter((k) => keys.get(k) === parent)
    const ctx = contexts.find(({ probe, run: c }) => c.present.has(parent) && probe.absent.length === 0)
    if (group.length < 2 || ctx === undefined) continue
    const absent = run(entry, { ...ctx.probe, absent: group })
    if (notesMore(absent.notes, ctx.run.notes, (p) => p === parent || within(p, parent))) continue
    for (const k of group) required.delete(k)
    together.set(parent, group)
  }
  // List lengths the readers refuse, by running them with 0, then 2, 4, … items (up to 4096).
  const itemBounds = new Map<string, { minItems?: number; maxItems?: number }>()
  for (const [path, list] of calls) {
    const ctx = contexts.find(({ run: c }) => c.present.has(path))
    if (!list.some((c) => c.kind === 'list') || ctx === undefined) continue
    const refused = (n: number): boolean =>
      notesMore(run(entry, { ...ctx.probe, items: [path, n] }).notes, ctx.run.notes, (p) => p === path)
    let [ok, bad] = [1, 2]
    while (bad <= 4096 && !refused(bad)) [ok, bad] = [bad, bad * 2]
    while (bad <= 4096 && bad - ok > 1)
      [ok, bad] = refused(Math.floor((ok + bad) / 2)) ? [ok, Math.floor((ok + bad) / 2)] : [Math.floor((ok + bad) / 2), bad]
    const bounds = { ...(refused(0) ? { minItems: 1 } : {}), ...(bad <= 4096 ? { maxItems: ok } : {}) }
    if (Object.keys(bounds).length > 0) itemBounds.set(path, bounds)
  }
  return { calls, keys, required, itemBounds, together, nullable, defaults }
}

/** True when `parent` is `path` or below it. */
function isParent(path: string, parent: string): boolean {
  return path === '' || within(parent, path)
}

/** True when `path` is `key` or below it. */
function within(path: string, key: string): boolean {
  return path === key || path.startsWith(`${key}.`) || path.startsWith(`${key}[`)
}

/** True when `after` notes more problems than `before` at some path `where` accepts. */
function notesMore(after: readonly string[], before: readonly string[], where: (path: string) => boolean): boolean {
  const count = (notes: readonly string[], path: string): number => notes.filter((p) => p === path).length
  return after.some((p) => where(p) && count(after, p) > count(before, p))
}

function sameNotes(a: readonly string[], b: readonly string[]): boolean {
  return JSON.stringify([...a].sort()) === JSON.stringify([...b].sort())
}

export type JsonSchema = { [keyword: string]: unknown }

export interface BuildOptions {
  /** Strings may hold `${VAR}` (wardline.yaml); a policy file is taken literally. */
  readonly environment: boolean
}

function build(rec: Recording, path: string, options: BuildOptions): JsonSchema {
  const fragments = (rec.calls.get(path) ?? []).map((call) => fragment(rec, path, call, options))
  const schema: JsonSchema = fragments.length === 1 ? fragments[0] : fragments.length === 0 ? {} : { anyOf: fragments }
  const described: JsonSchema = {}
  const description = DESCRIPTIONS[pattern(path)]
  if (description !== undefined) described.description = description
  if (rec.defaults.has(path)) described.default = rec.defaults.get(path)
  return { ...described, ...(rec.nullable.has(path) ? orNull(schema) : schema) }
}

function fragment(rec: Recording, path: string, call: Call, options: BuildOptions): JsonSchema {
  const env = (schema: JsonSchema): JsonSchema =>
    options.environment ? { anyOf: [schema, { $ref: '#/definitions/environment' }] } : schema
  switch (call.kind) {
    case 'object': {
      const properties: Record<string, JsonSchema> = {}
      for (const key of call.allowed) properties[key] = build(rec, join(path, key), options)
      const required = call.allowed.filter((key) => rec.required.has(join(path, key)))
      const together = (rec.together.get(path) ?? []).map((k) => k.slice(join(path, '').length))
      const dependencies = Object.fromEntries(together.map((k) => [k, together.filter((o) => o !== k)]))
      return {
        type: 'object',
        properties,
        ...(required.length > 0 ? { required } : {}),
        ...(together.length > 0 ? { dependencies } : {}),
        additionalProperties: false,
      }
    }
    case 'map':
      return { type: 'object', additionalProperties: build(rec, join(path, ENTRY), options) }
    case 'list':
      return { type: 'array', items: build(rec, join(path, 0), options), ...rec.itemBounds.get(path) }
    case 'string':
      return { type: 'string', ...(call.nonEmpty ? { minLength: 1 } : {}) }
    case 'optionalString':
      return { type: 'string', minLength: 1 }
    case 'stringOrList':
      return {
        anyOf: [
          { type: 'string', minLength: 1 },
          { type: 'array', items: { type: 'string', minLength: 1 } },
        ],
      }
    case 'bool':
      return env({ type: 'boolean' })
    case 'int':
      return env({ type: 'integer', minimum: call.min, maximum: call.max })
    case 'number':
      return env({
        type: 'number',
        ...(call.exclusiveMin ? { exclusiveMinimum: call.min } : { minimum: call.min }),
        maximum: call.max,
      })
    case 'oneOf':
      return env({ enum: [...call.choices] })
  }
}

/** The same schema, also accepting null (`key:` with nothing after it). */
function orNull(schema: JsonSchema): JsonSchema {
  if (typeof schema.type === 'string' && schema.anyOf === undefined) return { ...schema, type: [schema.type, 'null'] }
  if (Array.isArray(schema.anyOf)) return { ...schema, anyOf: [...(schema.anyOf as JsonSchema[]), { type: 'null' }] }
  return { anyOf: [schema, { type: 'null' }] }
}

/** A path as the descriptions name it: `budget.tenants.*.limits[].window_seconds`. */
function pattern(path: string): string {
  return path.split(ENTRY).join('*').split('[0]').join('[]')
}

/** Recorded once per process, each on first use (about a second for wardline.yaml's thousands of runs). */
const recordings: { config?: Recording; policy?: Recording } = {}
const recorded = {
  get config(): Recording {
    return (recordings.config ??= record(CONFIG_ENTRY))
  },
  get policy(): Recording {
    return (recordings.policy ??= record(POLICY_ENTRY))
  },
}

/**
 * The schema any reader records, started on a tree where every key is present: how a reader written
 * with the ordinary Reader calls gets its schema (the tests use it on readers of their own).
 */
export function schemaOfReader(read: (r: Reader, tree: unknown) => void, options: BuildOptions = { environment: true }): JsonSchema {
  const root = build(
    record((r) => read(r, PRESENT)),
    '',
    options,
  )
  return options.environment ? { ...root, definitions: DEFINITIONS } : root
}

/** What `$ref: '#/definitions/environment'` names: a string holding a `${VAR}` reference. */
const DEFINITIONS = {
  environment: {
    type: 'string',
    pattern: ENV_REFERENCE,
    description: 'Read from the environment when the file is loaded: ${VAR}, or ${VAR:-default} when VAR is unset or empty.',
  },
}

/** The JSON Schema of wardline.yaml, as `wardline schema` prints it. */
export function configSchema(): JsonSchema {
  const root = build(recorded.config, '', { environment: true })
  return {
    $schema: DRAFT,
    title: 'wardline.yaml',
    description:
      'Wardline gateway configuration (docs/configuration.md). Generated by `wardline schema` from the readers `wardline check-config` runs; cross-field rules (one JWT key source, postgres.dsn with postgres_storage…) are checked by check-config only.',
    ...root,
    definitions: DEFINITIONS,
  }
}

/** The JSON Schema of a policy file (`policy_file:`), as `wardline schema --policy` prints it. Taken literally: no ${VAR}. */
export function policySchema(): JsonSchema {
  const { description: _inline, ...root } = build(recorded.policy, 'policy', { environment: false })
  return {
    $schema: DRAFT,
    title: 'Wardline policy file',
    description: 'A policy file (policy_file: in wardline.yaml): the same mapping as the inline policy block (docs/policy.md).',
    ...root,
  }
}

/**
 * Every key path the schema lists (`budget.tools.*.cost`, `policy.rules[].effect`) with the call that
 * reads it; the tests walk this to compare the schema with check-config key by key.
 */
export function schemaKeys(which: 'config' | 'policy' = 'config'): Array<{ path: string; pattern: string; calls: readonly Call[] }> {
  const rec = recorded[which]
  return [...rec.calls].map(([path, calls]) => ({ path, pattern: pattern(path), calls }))
}

/** The entry name maps are recorded with, for tests that turn a recorded path into a YAML document. */
export const SCHEMA_ENTRY_NAME = ENTRY

/**
 * What editors show when hovering a key. Prose only: types, bounds, choices and defaults come from the
 * readers. A key without a line here is still in the schema, with everything but its description.
 */
const DESCRIPTIONS: Readonly<Record<string, string>> = {
  listen: 'Where the gateway listens: host:port (IPv6 as [::1]:8080; port 0 picks a free one).',
  upstream:
    'The MCP server behind the gateway: an absolute http(s) URL without query, fragment or credentials; request paths are appended.',
  upstream_timeout_seconds: "Time allowed until the upstream's response headers; past it 504. Never cuts a body or an SSE stream.",
  upstream_connections: 'Keep-alive connections to the upstream for calls.',
  upstream_health_check:
    'The probe of the upstream: a request on a schedule and at startup; a refused connection, a timeout or a 5xx is down, any other answer up. Reported in /readyz and wardline_upstream_up.',
  'upstream_health_check.enabled': 'false: no probe; /readyz then says nothing about the upstream.',
  'upstream_health_check.url': "The URL probed (a server's own /health); absent: the upstream URL itself. No credentials.",
  'upstream_health_check.method':
    'GET, HEAD or OPTIONS: safe methods only. GET asks for JSON, so an MCP endpoint answers 406 instead of streaming.',
  'upstream_health_check.interval_seconds': 'From the start of one probe to the start of the next.',
  'upstream_health_check.timeout_seconds': "Bound on one probe: connection and the answer's head; past it, down.",
  'upstream_health_check.affects_readiness': 'true: a down upstream makes /readyz answer 503; false: reported in its body only.',
  max_body_bytes: 'Largest request body read; larger gets 413.',
  max_json_depth: 'Deepest nesting in a POST body; deeper gets 400 before the body is parsed.',
  max_batch_messages: 'Most JSON-RPC messages in one batch; more gets 400.',
  max_concurrent_per_identity: 'Requests (streams included) one identity may have in flight; past it 429.',
  session_idle_seconds: 'A session unused by the principal that created it for this long is no longer bound to it.',
  max_sessions: 'Most sessions bound to their creator; when full, the least recently used binding is forgotten.',
  max_sessions_per_identity: "Most sessions bound to one identity; past it, that identity's least recently used binding is forgotten.",
  request_timeout_seconds: 'Time to receive a whole request (headers and body); past it 408. Never cuts a response.',
  allowed_origins:
    "Browser origins (scheme://host[:port]) allowed to call besides the request's own; any other Origin gets 403 (DNS-rebinding protection). Empty on a loopback listener: loopback origins pass.",
  'allowed_origins[]': 'An origin as browsers send it: https://app.example.com, or null.',
  allowed_hosts: 'Host header values accepted ([] accepts any): example.com, 127.0.0.1:8080, [::1]:8080.',
  'allowed_hosts[]': 'A host name or IP address with an optional port.',
  trusted_proxies: 'Peers whose X-Forwarded-For/-Host/-Proto are kept: IP addresses or CIDR blocks.',
  'trusted_proxies[]': 'An IP address or CIDR block: 10.0.0.0/8, ::1.',
  shutdown_grace_seconds: 'On SIGTERM/SIGINT, how long in-flight requests may run before their connections are closed.',
  shutdown_delay_seconds: 'On SIGTERM/SIGINT, how long /readyz answers 503 while the gateway still serves.',
  log_level: 'Application logs on stderr.',
  log_format: 'auto: one human line per event on a terminal, JSON otherwise; json or text force one.',
  tool_refusals:
    'How a refused tools/call is answered: http (429/403 with a JSON-RPC error) or result (HTTP 200 with a tool result marked isError a model can read).',
  features: 'Feature flags.',
  'features.budget_enforcement': 'Run the budget stage; false: the budget block is ignored.',
  'features.postgres_storage': 'Keep budgets and the audit trail in Postgres (needs postgres.dsn); replicas then share them.',
  audit: 'The audit trail: one entry per decision.',
  'audit.output':
    'Where JSONL audit lines go: stdout or a file path (relative to this file). null: none, only with features.postgres_storage.',
  'audit.spill_file': 'Where entries wait while the Postgres sink fails; replayed when it is back.',
  'audit.max_queue_entries': 'Entries held in memory per sink; past it new calls get 503.',
  'audit.retention_days': 'Delete audit_entries rows older than this many days (Postgres storage only). Absent: keep every row.',
  auth: 'Who is calling (docs/auth.md).',
  'auth.mode': 'jwt: verify Authorization: Bearer; header: trust X-Wardline-Identity / X-Wardline-Tenant (trusted networks only).',
  'auth.resource_metadata_url': 'Advertised on every 401 as WWW-Authenticate resource_metadata (RFC 9728).',
  'auth.resource_metadata': 'Protected resource metadata served at /.well-known/oauth-protected-resource.',
  'auth.resource_metadata.resource': 'The resource identifier (an http(s) URL).',
  'auth.resource_metadata.authorization_servers': 'Authorization server URLs: one or a list.',
  'auth.resource_metadata.scopes_supported': 'Scopes: one or a list.',
  'auth.jwt': 'Bearer token verification: exactly one of secret, jwks_url, jwks_file, public_key_file.',
  'auth.jwt.secret': 'HS256/384/512 key, at least 32 bytes: use ${WARDLINE_JWT_SECRET}.',
  'auth.jwt.jwks_url': 'Remote JWKS, fetched at startup and refreshed in the background.',
  'auth.jwt.jwks_file': 'Local JWKS file.',
  'auth.jwt.public_key_file': 'PEM public key (SPKI) or certificate.',
  'auth.jwt.issuer': 'Required iss claim; absent: not checked.',
  'auth.jwt.audience': 'Accepted aud values: one or a list; absent: not checked.',
  'auth.jwt.algorithms':
    'Accepted algorithms: HS256/384/512 with a secret (default HS256); RS*, PS*, ES*, EdDSA with the other key sources, where it is required.',
  'auth.jwt.identity_claim': 'Claim holding the identity.',
  'auth.jwt.tenant_claim': 'Claim holding the tenant.',
  'auth.jwt.require_tenant': 'true: a token without the tenant claim gets 401; false: it gets tenant default.',
  'auth.jwt.clock_tolerance_seconds': 'Leeway for exp / nbf / a future iat.',
  'auth.jwt.jwks_timeout_seconds': 'Bound on one JWKS fetch.',
  'auth.jwt.jwks_cache_seconds': 'JWKS refresh interval.',
  'auth.jwt.jwks_cooldown_seconds': 'Least time between JWKS fetch attempts triggered by requests (unknown kid).',
  'auth.jwt.cache_entries': 'Verified tokens remembered (0 disables); an entry never outlives its token.',
  budget: 'Request budgets (docs/budget.md); used with features.budget_enforcement.',
  'budget.requests_per_window': "Each identity's limit in units per window.",
  'budget.window_seconds': "Each identity's fixed window, opening at its first call (fractions allowed, up to 31 days).",
  'budget.limits': 'Instead of the pair: several windows (1 to 8, distinct lengths), all of which must admit.',
  'budget.limits[]': 'One window.',
  'budget.limits[].requests_per_window': 'Units this window admits.',
  'budget.limits[].window_seconds': "This window's length (fractions allowed, up to 31 days); each length once per list.",
  'budget.tenants': 'Buckets shared by every identity of a tenant, by tenant name.',
  'budget.tenants.*': "A tenant's bucket: the pair or limits; a key left out takes the top-level value.",
  'budget.tools': 'Buckets shared by every caller of a tool, by tool name.',
  'budget.tools.*': "A tool's bucket and cost; an entry with only cost has no bucket of its own.",
  'budget.tools.*.cost': 'Units one call charges to every bucket it passes.',
  'budget.tenants.*.requests_per_window': "The tenant's limit in units per window; left out: the top-level value.",
  'budget.tenants.*.window_seconds': "The tenant's window; left out: the top-level one.",
  'budget.tenants.*.limits': "Instead of the pair: the tenant's windows, as budget.limits.",
  'budget.tenants.*.limits[]': 'One window.',
  'budget.tenants.*.limits[].requests_per_window': 'Units this window admits.',
  'budget.tenants.*.limits[].window_seconds': "This window's length (fractions allowed, up to 31 days).",
  'budget.tools.*.requests_per_window': "The tool's limit in units per window; left out: the top-level value.",
  'budget.tools.*.window_seconds': "The tool's window; left out: the top-level one.",
  'budget.tools.*.limits': "Instead of the pair: the tool's windows, as budget.limits.",
  'budget.tools.*.limits[]': 'One window.',
  'budget.tools.*.limits[].requests_per_window': 'Units this window admits.',
  'budget.tools.*.limits[].window_seconds': "This window's length (fractions allowed, up to 31 days).",
  'budget.repeat_limit': 'Loop breaker: more identical calls (identity, tool, arguments) than calls in the window get 429.',
  'budget.repeat_limit.calls': 'Identical calls allowed in the window.',
  'budget.repeat_limit.window_seconds': "The loop breaker's window.",
  'budget.check_timeout_seconds': 'Bound on one budget check, start to verdict.',
  'budget.on_store_error':
    'When the store fails: open admits (and says so in the audit), closed answers 503, local judges on this replica at limit ÷ live replicas.',
  policy: 'Who may call what (docs/policy.md); or keep the rules in policy_file.',
  policy_file: 'A YAML file holding default and rules (relative to this file); instead of the inline policy block.',
  'policy.default': 'The decision when no rule matches.',
  'policy.rules': 'Checked in order; the first match wins.',
  'policy.rules[]': 'A rule: identity, tool and effect are required.',
  'policy.rules[].identity': "The caller's identity (glob: * matches any run of characters).",
  'policy.rules[].tenant': "The caller's tenant (glob); absent: any tenant.",
  'policy.rules[].method': 'tools/call, a resources/… or prompts/… method, resources/*, prompts/* or *.',
  'policy.rules[].tool': 'Tool name, resource URI or prompt name (glob); * also matches list calls.',
  'policy.rules[].effect': 'What a match decides.',
  'policy.filter_lists': 'List answers (tools/list, …) and resource completions show only what the caller may use.',
  postgres: 'Shared storage for budgets and the audit trail (docs/postgres.md).',
  'postgres.dsn': 'postgres:// or postgresql:// URL: use ${WARDLINE_POSTGRES_DSN}.',
  'postgres.max_connections': 'The one pool shared by budgets and the audit trail.',
  admin: 'The admin API on its own listener, off unless listen is set.',
  'admin.listen': 'host:port of the admin listener; must differ from listen.',
  'admin.token': 'Bearer token for the admin API, at least 32 bytes: use ${WARDLINE_ADMIN_TOKEN}.',
  'admin.tls': 'Serve the admin API over HTTPS; the CLI trusts the certificate cert_file names.',
  'admin.tls.cert_file': 'PEM certificate of the admin listener, its chain after it (relative to this file).',
  'admin.tls.key_file': 'PEM private key of that certificate, unencrypted.',
  tls: 'Serve the main listener over HTTPS (TLS 1.2+); SIGHUP re-reads the files.',
  'tls.cert_file': 'PEM certificate, its intermediate certificates after it (relative to this file).',
  'tls.key_file': 'PEM private key of that certificate, unencrypted.',
  'tls.ca_file': 'PEM CA certificates a client certificate must chain to; set: every client must present one.',
  metrics: 'Where /metrics is served.',
  'metrics.listen': 'host:port of a plain-HTTP listener for /metrics, /healthz and /readyz; /metrics then answers 404 on listen.',
}

/** Description patterns, for the test that no line describes a key that no longer exists. */
export const DESCRIBED_PATTERNS: readonly string[] = Object.keys(DESCRIPTIONS)
