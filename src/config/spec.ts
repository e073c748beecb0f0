import { type TLiteral, type TSchema, type TUnion, Type } from '@sinclair/typebox'
import type { Config } from './types'

/**
 * The declarative schema of wardline.yaml: every key once, with its type, bounds, choices, default,
 * description, whether it may be left blank, and whether a reload can apply it. Everything else is
 * made from it: the readers take their allowed keys and leaf checks from it (config/read-node.ts),
 * `wardline schema` prints it as JSON Schema (config/schema.ts), reloads find the keys that need a
 * restart (config/restart-keys.ts) and the keys they may not lose (config/reload-guard.ts) in it, the
 * logs mask the keys it marks secret (config/diff.ts), and docs/configuration.md shows its key table
 * (config/key-table.ts). Cross-field rules (one JWT key source, postgres.dsn with postgres_storage)
 * and formats (URLs, host:port) stay code in the readers.
 *
 * The nodes are TypeBox schemas (plain JSON Schema objects): what the JSON Schema says is the node
 * itself, and `Static<typeof NODE>` is the TypeScript type of a key (types.ts takes the choice types
 * from here). What JSON Schema has no word for rides on each node under the `META` symbol, which no
 * JSON output shows.
 *
 * Every block is a value, not a place: a reader is given a block's node and the path the block sits
 * at, so the same block can be read at any path (`upstream_health_check` today, a server's own later).
 */

/** 31 days: "1,000 a day" and "20,000 a month" are budgets operators ask for; longer is a quota, not a rate. */
export const MAX_WINDOW_SECONDS = 31 * 86_400

export const META: unique symbol = Symbol('wardline.key')

export interface KeyMeta {
  /**
   * A reload cannot apply this top-level key: what it reads from a Config, compared between the
   * running and the new one (a changed value needs a restart). Absent: a reload applies the key.
   */
  readonly restart?: (config: Config) => unknown
  /**
   * A reload may not lose this key (config/reload-guard.ts): losing it turns enforcement off or
   * loosens it, so a file that leaves it out or blank while the running file set it is refused, as a
   * file cut short by a write in progress. `removeWith` is how an operator removes it on purpose (a
   * cut can never write it); `or` names sibling keys that stand in for it (the policy in a policy_file).
   * Only on keys at a fixed path (not inside a list or a mapping of names).
   */
  readonly guard?: { readonly removeWith: string; readonly or?: readonly string[] }
  /**
   * The value is a secret and never reaches a log line (config/diff.ts): `true` masks it whole; `'url'`
   * is a URL whose password and query are masked and whose host and path are shown (which database a
   * reload now points at).
   */
  readonly secret?: true | 'url'
  /** `key:` with nothing after it reads as the key left out (the default for keys that are not required). */
  readonly blank?: boolean
  /** The key is read as one string or a list of strings (an audience, the accepted algorithms). */
  readonly stringOrList?: boolean
}

/** Options every key builder takes: prose for editors and the docs table, and the metadata above. */
interface KeyOptions extends KeyMeta {
  readonly description?: string
  readonly required?: boolean
}

/** A node's metadata (empty for nodes made without any). */
export function metaOf(node: TSchema): KeyMeta & { readonly required?: boolean } {
  return (node as { [META]?: KeyMeta })[META] ?? {}
}

function tag<T extends TSchema>(node: T, options: KeyOptions): T {
  const { description, required, ...meta } = options
  if (description !== undefined) (node as { description?: string }).description = description
  Object.defineProperty(node, META, { value: { ...meta, required: required === true }, enumerable: true })
  return node
}

/** A block placed at one path with metadata of that place (a restart flag): the block itself is unchanged. */
export function placed<T extends TSchema>(node: T, meta: KeyMeta): T {
  const copy = Object.assign({}, node)
  Object.defineProperty(copy, META, { value: { ...metaOf(node), ...meta }, enumerable: true })
  return copy
}

/** A whole number in [min, max]. */
export function int(min: number, max: number, options: KeyOptions & { default?: number } = {}) {
  return tag(Type.Integer({ minimum: min, maximum: max, ...(options.default === undefined ? {} : { default: options.default }) }), options)
}

/** A number in [min, max], or (min, max] with `exclusiveMin`. */
export function num(min: number, max: number, options: KeyOptions & { default?: number; exclusiveMin?: boolean } = {}) {
  const lower = options.exclusiveMin ? { exclusiveMinimum: min } : { minimum: min }
  return tag(Type.Number({ ...lower, maximum: max, ...(options.default === undefined ? {} : { default: options.default }) }), options)
}

export function bool(options: KeyOptions & { default?: boolean } = {}) {
  return tag(Type.Boolean(options.default === undefined ? {} : { default: options.default }), options)
}

/** One of a few words (case-sensitive). */
export function choice<const T extends readonly string[]>(choices: T, options: KeyOptions & { default?: T[number] } = {}) {
  const literals = choices.map((c) => Type.Literal(c))
  const node = Type.Union(literals, options.default === undefined ? {} : { default: options.default })
  return tag(node as unknown as TUnion<Array<TLiteral<T[number]>>>, options)
}

/** Text; `nonEmpty` (the usual) refuses `""`. */
export function str(options: KeyOptions & { default?: string; nonEmpty?: boolean } = {}) {
  return tag(
    Type.String({
      ...(options.nonEmpty === false ? {} : { minLength: 1 }),
      ...(options.default === undefined ? {} : { default: options.default }),
    }),
    options,
  )
}

/** One string or a list of strings, none empty. */
export function strings(options: KeyOptions = {}) {
  return tag(Type.Union([Type.String({ minLength: 1 }), Type.Array(Type.String({ minLength: 1 }))]), { ...options, stringOrList: true })
}

export function list<T extends TSchema>(items: T, options: KeyOptions & { minItems?: number; maxItems?: number } = {}) {
  const bounds = {
    ...(options.minItems === undefined ? {} : { minItems: options.minItems }),
    ...(options.maxItems === undefined ? {} : { maxItems: options.maxItems }),
  }
  return tag(Type.Array(items, bounds), options)
}

/** A mapping of fixed keys; a key marked `required` must be given. */
export function block<P extends Record<string, TSchema>>(properties: P, options: KeyOptions = {}) {
  const shaped = Object.fromEntries(Object.entries(properties).map(([k, v]) => [k, metaOf(v).required ? v : Type.Optional(v)])) as {
    [K in keyof P]: P[K]
  }
  return tag(Type.Object(shaped, { additionalProperties: false }), options)
}

/**
 * A mapping whose keys the operator names (tenants, tools), each holding `entry`. `names`: the
 * pattern every name must match (the readers check it; the JSON Schema states it as propertyNames,
 * so an editor flags a bad name as it is typed).
 */
export function named<T extends TSchema>(entry: T, options: KeyOptions & { names?: RegExp } = {}) {
  const { names, ...rest } = options
  return tag(Type.Record(names === undefined ? Type.String() : Type.String({ pattern: names.source }), entry), rest)
}

/** The pattern a `named` mapping's names must match, or null when any name goes. */
export function namesOf(node: TSchema): string | null {
  const [key] = Object.keys((node as unknown as { patternProperties: Record<string, TSchema> }).patternProperties)
  // TypeBox writes the key pattern of an unconstrained string key as this.
  return key === '^(.*)$' ? null : key
}

/** The node each entry of a `named` mapping holds. */
export function entryOf(node: TSchema): TSchema {
  return Object.values((node as unknown as { patternProperties: Record<string, TSchema> }).patternProperties)[0]
}

/** The keys of a block node, in order: what a reader allows there. */
export function keysOf(node: TSchema): string[] {
  return Object.keys((node as { properties?: object }).properties ?? {})
}

/** The node of one key of a block. */
export function keyNode(node: TSchema, key: string): TSchema {
  return (node as unknown as { properties: Record<string, TSchema> }).properties[key]
}

/** The node of what sits under `key` in a value of `node`: a block's key, a named entry, a list item; undefined elsewhere. */
export function childOf(node: TSchema, key: string | number): TSchema | undefined {
  const s = node as { properties?: Record<string, TSchema>; patternProperties?: object; type?: string; items?: TSchema }
  if (typeof key === 'number') return s.type === 'array' ? s.items : undefined
  if (s.properties !== undefined) return Object.hasOwn(s.properties, key) ? s.properties[key] : undefined
  return s.patternProperties === undefined ? undefined : entryOf(node)
}

/** A host:port listener address (IPv6 in brackets). */
const listenAddress = (description: string, blank = true) => str({ description, blank })

/** The certificate files of one listener; `clientCertificates` adds the CA clients must chain to. */
export function tlsBlock(description: string, files: { cert: string; key: string; ca?: string }) {
  return block(
    {
      cert_file: str({ description: files.cert, required: true }),
      key_file: str({ description: files.key, required: true }),
      ...(files.ca === undefined ? {} : { ca_file: str({ description: files.ca }) }),
    },
    { description },
  )
}

/** How one upstream is probed (upstream/probe.ts). */
export const HEALTH_CHECK = block(
  {
    enabled: bool({ default: true, description: 'false: no probe; /readyz then says nothing about the upstream.' }),
    url: str({ description: "The URL probed (a server's own /health); absent: the upstream URL itself. No credentials." }),
    method: choice(['GET', 'HEAD', 'OPTIONS'], {
      default: 'GET',
      description: 'GET, HEAD or OPTIONS: safe methods only. GET asks for JSON, so an MCP endpoint answers 406 instead of streaming.',
    }),
    interval_seconds: num(0, 3600, {
      exclusiveMin: true,
      default: 10,
      description: 'From the start of one probe to the start of the next.',
    }),
    // 2 s: an MCP server answers an unsessioned GET at once (400, 405 or 406); a slower head is a sick server.
    timeout_seconds: num(0, 60, {
      exclusiveMin: true,
      default: 2,
      description: "Bound on one probe: connection and the answer's head; past it, down.",
    }),
    affects_readiness: bool({
      default: true,
      description: 'true: a down upstream makes /readyz answer 503; false: reported in its body only.',
    }),
  },
  {
    description:
      'The probe of the upstream: a request on a schedule and at startup; a refused connection, a timeout or a 5xx is down, any other answer up. Reported in /readyz and wardline_upstream_up.',
  },
)

/** A server's name: the path segment after /mcp/, lower-case so that one name has one spelling. */
export const SERVER_NAME = /^[a-z0-9][a-z0-9_-]{0,31}$/

/**
 * A path below a legacy (`sse`) server's name: the message endpoint its stream named, relative to the
 * server's origin. Plain segments only: no empty, `.` or `..` segment, no percent-encoding, nothing a
 * server could decode into another path.
 */
export const MESSAGE_PATH = /^(?:\/[A-Za-z0-9\-_~!$&'()*+,;=:@]+(?:\.[A-Za-z0-9\-_~!$&'()*+,;=:@]*)*)+\/?$/

/** One entry of `servers:`: an MCP server reached at /mcp/<name>. */
export const SERVER = block(
  {
    url: str({
      required: true,
      description:
        "The server's MCP endpoint, path included (sse: the URL its event stream is opened at); an absolute http(s) URL without credentials, query or fragment.",
    }),
    transport: choice(['streamable', 'sse'], {
      default: 'streamable',
      description: 'streamable (Streamable HTTP: one endpoint) or sse (the legacy HTTP+SSE pair of MCP 2024-11-05).',
    }),
    headers: named(str({ secret: true, description: 'A header value, not empty; ${VAR} reads it from the environment.' }), {
      description:
        "Sent on every request to this server, replacing a client-sent header of the same name (the server's own credentials). Values are never logged.",
    }),
    message_path: str({
      description:
        "transport: sse only: the path on the server's origin its endpoint event names (/messages); set, POSTs below /mcp/<name> reach that path alone and a stream naming another is ended. Unset: any plain path.",
    }),
    timeout_seconds: num(0, 3600, {
      exclusiveMin: true,
      description: "Time allowed until this server's response headers; past it 504. Default: upstream_timeout_seconds.",
    }),
    connections: int(1, 10_000, { description: 'Keep-alive connections to this server for calls. Default: upstream_connections.' }),
    health_check: placed(HEALTH_CHECK, {}),
  },
  { description: 'One MCP server behind the gateway, reached at /mcp/<name>.' },
)

/** One window of a bucket, in a `limits:` list. */
function windowItem(windowDescription: string) {
  return block(
    {
      requests_per_window: int(1, 1_000_000_000, { required: true, description: 'Units this window admits.' }),
      window_seconds: num(0, MAX_WINDOW_SECONDS, { exclusiveMin: true, required: true, description: windowDescription }),
    },
    { description: 'One window.' },
  )
}

/** 1 to 8 windows, each length once. */
function windows(description: string, windowDescription: string) {
  return list(windowItem(windowDescription), { minItems: 1, maxItems: 8, blank: false, description })
}

/** A tenant's or a tool's bucket: the pair or `limits`, a key left out taking the top-level value. */
function bucket(owner: 'tenant' | 'tool' | 'server') {
  return {
    requests_per_window: int(1, 1_000_000_000, { description: `The ${owner}'s limit in units per window; left out: the top-level value.` }),
    window_seconds: num(0, MAX_WINDOW_SECONDS, { exclusiveMin: true, description: `The ${owner}'s window; left out: the top-level one.` }),
    limits: windows(
      `Instead of the pair: the ${owner}'s windows, as budget.limits.`,
      "This window's length (fractions allowed, up to 31 days).",
    ),
  }
}

export const BUDGET = block(
  {
    requests_per_window: int(1, 1_000_000_000, { description: "Each identity's limit in units per window." }),
    window_seconds: num(0, MAX_WINDOW_SECONDS, {
      exclusiveMin: true,
      description: "Each identity's fixed window, opening at its first call (fractions allowed, up to 31 days).",
    }),
    limits: windows(
      'Instead of the pair: several windows (1 to 8, distinct lengths), all of which must admit.',
      "This window's length (fractions allowed, up to 31 days); each length once per list.",
    ),
    tenants: named(
      block(bucket('tenant'), { description: "A tenant's bucket: the pair or limits; a key left out takes the top-level value." }),
      {
        description: 'Buckets shared by every identity of a tenant, by tenant name.',
      },
    ),
    tools: named(
      block(
        { ...bucket('tool'), cost: int(1, 1_000_000, { default: 1, description: 'Units one call charges to every bucket it passes.' }) },
        { description: "A tool's bucket and cost; an entry with only cost has no bucket of its own." },
      ),
      { description: 'Buckets shared by every caller of a tool, by tool name; with servers, by <server>/<tool>.' },
    ),
    servers: named(
      block(bucket('server'), {
        description: "A server's bucket: the pair or limits; a key left out takes the top-level value.",
      }),
      { description: 'With servers: buckets shared by every caller of one server (its own API quota), by server name.' },
    ),
    repeat_limit: block(
      {
        calls: int(1, 1_000_000, { required: true, description: 'Identical calls allowed in the window.' }),
        window_seconds: num(0, MAX_WINDOW_SECONDS, { exclusiveMin: true, required: true, description: "The loop breaker's window." }),
      },
      { description: 'Loop breaker: more identical calls (identity, tool, arguments) than calls in the window get 429.' },
    ),
    // 5 s: long enough to ride out a pool wait under a burst, short enough that a hung database
    // degrades to "fail open" before an MCP client's own request timeout fires.
    check_timeout_seconds: num(0, 60, { exclusiveMin: true, default: 5, description: 'Bound on one budget check, start to verdict.' }),
    // open stays the default: with the memory store (one process) nothing can fail, and an operator who
    // runs replicas on Postgres chooses between availability, enforcement and a local limit knowingly.
    on_store_error: choice(['open', 'closed', 'local'], {
      default: 'open',
      description:
        'When the store fails: open admits (and says so in the audit), closed answers 503, local judges on this replica at limit ÷ live replicas.',
    }),
  },
  { description: 'Request budgets (docs/budget.md); used with features.budget_enforcement.', guard: { removeWith: 'budget: {}' } },
)

export const EFFECTS = ['allow', 'deny'] as const

/** The policy mapping, inline (`policy:`) or in a policy file. */
export const POLICY = block(
  {
    default: choice(EFFECTS, { required: true, description: 'The decision when no rule matches.' }),
    rules: list(
      block(
        {
          identity: str({ required: true, description: "The caller's identity (glob: * matches any run of characters)." }),
          tenant: str({ description: "The caller's tenant (glob); absent: any tenant." }),
          method: str({
            default: 'tools/call',
            description: 'tools/call, a resources/… or prompts/… method, resources/*, prompts/* or *.',
          }),
          tool: str({ required: true, description: 'Tool name, resource URI or prompt name (glob); * also matches list calls.' }),
          server: str({
            default: '*',
            description: 'The server (a name in servers:, glob) whose calls the rule judges; only * with upstream: alone.',
          }),
          effect: choice(EFFECTS, { required: true, description: 'What a match decides.' }),
        },
        { description: 'A rule: identity, tool and effect are required.' },
      ),
      { description: 'Checked in order; the first match wins.' },
    ),
    // Lists show a caller only what it may use unless the operator turns it off (docs/policy.md).
    filter_lists: bool({
      default: true,
      description: 'List answers (tools/list, …) and resource completions show only what the caller may use.',
    }),
  },
  { description: 'Who may call what (docs/policy.md); or keep the rules in policy_file.', blank: false },
)

export const JWT = block(
  {
    secret: str({ secret: true, description: 'HS256/384/512 key, at least 32 bytes: use ${WARDLINE_JWT_SECRET}.' }),
    jwks_url: str({ description: 'Remote JWKS, fetched at startup and refreshed in the background.' }),
    jwks_file: str({ description: 'Local JWKS file.' }),
    public_key_file: str({ description: 'PEM public key (SPKI) or certificate.' }),
    issuer: str({ description: 'Required iss claim; absent: not checked.' }),
    audience: strings({ description: 'Accepted aud values: one or a list; absent: not checked.' }),
    algorithms: strings({
      description:
        'Accepted algorithms: HS256/384/512 with a secret (default HS256); RS*, PS*, ES*, EdDSA with the other key sources, where it is required.',
    }),
    identity_claim: str({ default: 'sub', description: 'Claim holding the identity.' }),
    tenant_claim: str({ default: 'tenant', description: 'Claim holding the tenant.' }),
    require_tenant: bool({
      default: false,
      description: 'true: a token without the tenant claim gets 401; false: it gets tenant default.',
    }),
    clock_tolerance_seconds: int(0, 3600, { default: 30, description: 'Leeway for exp / nbf / a future iat.' }),
    jwks_timeout_seconds: num(0, 60, { exclusiveMin: true, default: 5, description: 'Bound on one JWKS fetch.' }),
    jwks_cache_seconds: int(1, 86_400, { default: 600, description: 'JWKS refresh interval.' }),
    // A request may refetch the JWKS (an unknown kid, or no keys yet) only once the last attempt,
    // successful or not, is this old: made-up kids cannot turn into a flood of requests to the
    // identity provider, even while it fails (auth/keys.ts).
    jwks_cooldown_seconds: int(0, 3600, {
      default: 30,
      description: 'Least time between JWKS fetch attempts triggered by requests (unknown kid).',
    }),
    cache_entries: int(0, 1_000_000, {
      default: 10_000,
      description: 'Verified tokens remembered (0 disables); an entry never outlives its token.',
    }),
  },
  { description: 'Bearer token verification: exactly one of secret, jwks_url, jwks_file, public_key_file.' },
)

export const AUTH = block(
  {
    mode: choice(['jwt', 'header'], {
      default: 'jwt',
      description: 'jwt: verify Authorization: Bearer; header: trust X-Wardline-Identity / X-Wardline-Tenant (trusted networks only).',
    }),
    jwt: JWT,
    resource_metadata_url: str({ description: 'Advertised on every 401 as WWW-Authenticate resource_metadata (RFC 9728).' }),
    resource_metadata: block(
      {
        resource: str({ required: true, description: 'The resource identifier (an http(s) URL).' }),
        authorization_servers: strings({ description: 'Authorization server URLs: one or a list.' }),
        scopes_supported: strings({ description: 'Scopes: one or a list.' }),
      },
      { description: 'Protected resource metadata served at /.well-known/oauth-protected-resource.' },
    ),
  },
  {
    description: 'Who is calling (docs/auth.md).',
    restart: (c) => c.auth,
    guard: { removeWith: 'an auth block (a gateway always authenticates)' },
  },
)

export const AUDIT = block(
  {
    output: str({
      default: 'stdout',
      description:
        'Where JSONL audit lines go: stdout or a file path (relative to this file). null: none, only with features.postgres_storage.',
    }),
    spill_file: str({
      default: '.wardline/audit-spill.jsonl',
      description: 'Where entries wait while the Postgres sink fails; replayed when it is back.',
    }),
    max_queue_entries: int(100, 10_000_000, {
      default: 100_000,
      description: 'Entries held in memory per sink; past it new calls get 503.',
    }),
    retention_days: int(1, 36_500, {
      description: 'Delete audit_entries rows older than this many days (Postgres storage only). Absent: keep every row.',
    }),
  },
  { description: 'The audit trail: one entry per decision.', restart: (c) => c.audit },
)

export const POSTGRES = block(
  {
    dsn: str({ required: true, secret: 'url', description: 'postgres:// or postgresql:// URL: use ${WARDLINE_POSTGRES_DSN}.' }),
    max_connections: int(1, 1000, { default: 10, description: 'The one pool shared by budgets and the audit trail.' }),
  },
  { description: 'Shared storage for budgets and the audit trail (docs/postgres.md).', restart: (c) => c.postgres },
)

export const FEATURES = block(
  {
    budget_enforcement: bool({
      default: false,
      guard: { removeWith: 'features: {budget_enforcement: false}' },
      description: 'Run the budget stage; false: the budget block is ignored.',
    }),
    postgres_storage: bool({
      default: false,
      guard: { removeWith: 'features: {postgres_storage: false}' },
      description: 'Keep budgets and the audit trail in Postgres (needs postgres.dsn); replicas then share them.',
    }),
  },
  { description: 'Feature flags.', restart: (c) => c.features },
)

export const ADMIN = block(
  {
    // listen and token are given together or not at all (ADMIN_TOGETHER): neither is left blank.
    listen: listenAddress('host:port of the admin listener; must differ from listen.', false),
    token: str({
      blank: false,
      secret: true,
      description: 'Bearer token for the admin API, at least 32 bytes: use ${WARDLINE_ADMIN_TOKEN}.',
    }),
    // Its own block, not the main listener's: the admin API is usually on loopback or a private network,
    // where another certificate (or none) fits, and its CLI trusts the certificate this block names.
    tls: tlsBlock('Serve the admin API over HTTPS; the CLI trusts the certificate cert_file names.', {
      cert: 'PEM certificate of the admin listener, its chain after it (relative to this file).',
      key: 'PEM private key of that certificate, unencrypted.',
    }),
  },
  // The listener is bound at startup; the token is compared as a digest made then.
  { description: 'The admin API on its own listener, off unless listen is set.', restart: (c) => c.admin },
)
/** listen and token go together: one without the other is refused (JSON Schema `dependencies`). */
export const ADMIN_TOGETHER = { listen: ['token'], token: ['listen'] }

/**
 * Exactly one of upstream (one server) and servers (several by name): the file's JSON Schema `oneOf`.
 * A blank `servers:` reads as left out, so only a mapping counts as servers given.
 */
export const ONE_UPSTREAM_KIND = [
  { properties: { upstream: true }, required: ['upstream'] },
  { properties: { servers: { type: 'object' } }, required: ['servers'] },
]

export const TLS = tlsBlock('Serve the main listener over HTTPS (TLS 1.2+); SIGHUP re-reads the files.', {
  cert: 'PEM certificate, its intermediate certificates after it (relative to this file).',
  key: 'PEM private key of that certificate, unencrypted.',
  ca: 'PEM CA certificates a client certificate must chain to; set: every client must present one.',
})

export const METRICS = block(
  {
    listen: listenAddress('host:port of a plain-HTTP listener for /metrics, /healthz and /readyz; /metrics then answers 404 on listen.'),
  },
  { description: 'Where /metrics is served.', restart: (c) => c.metrics },
)

// The choice keys the Config's types name (types.ts), kept apart from CONFIG_SPEC so those types do
// not depend on the restart accessors, which read a Config.
export const LOG_LEVEL = choice(['error', 'warn', 'info', 'debug'], { default: 'info', description: 'Application logs on stderr.' })
export const LOG_FORMAT = choice(['auto', 'json', 'text'], {
  default: 'auto',
  description: 'auto: one human line per event on a terminal, JSON otherwise; json or text force one.',
})
// `http` by default: what clients got before the key existed, and what budget.md documents.
export const TOOL_REFUSALS = choice(['http', 'result'], {
  default: 'http',
  description:
    'How a refused tools/call is answered: http (429/403 with a JSON-RPC error) or result (HTTP 200 with a tool result marked isError a model can read).',
})

const origin = str({ description: 'An origin as browsers send it: https://app.example.com, or null.' })

/** The whole file. The order is the order of the docs table and of the JSON Schema. */
export const CONFIG_SPEC = block({
  listen: str({
    default: '127.0.0.1:8080',
    description: 'Where the gateway listens: host:port (IPv6 as [::1]:8080; port 0 picks a free one).',
    restart: (c) => c.listen,
  }),
  // Not blank: `upstream:` with nothing after it is a mistake, not "use servers".
  upstream: str({
    blank: false,
    description:
      'The one MCP server behind the gateway (or use servers): an absolute http(s) URL without query, fragment or credentials; request paths are appended.',
    restart: (c) => c.upstream?.url ?? null,
  }),
  // Reloadable: a SIGHUP adds, removes and changes servers (server/router.ts).
  servers: named(SERVER, {
    names: SERVER_NAME,
    description:
      'Several MCP servers behind the gateway, by name ([a-z0-9][a-z0-9_-]{0,31}): each reached at /mcp/<name>. Instead of upstream, never with it.',
  }),
  default_server: str({ description: 'A name in servers also served at /mcp. Absent: /mcp names no server (404).' }),
  upstream_timeout_seconds: num(0, 3600, {
    exclusiveMin: true,
    default: 30,
    description: "Time allowed until the upstream's response headers; past it 504. Never cuts a body or an SSE stream.",
    restart: (c) => c.upstream?.timeoutSeconds ?? null,
  }),
  upstream_connections: int(1, 10_000, {
    default: 128,
    description: 'Keep-alive connections to the upstream for calls.',
    restart: (c) => c.upstream?.connections ?? null,
  }),
  // The probe's timer and its readiness check are made once, at startup.
  upstream_health_check: placed(HEALTH_CHECK, { restart: (c) => c.upstream?.healthCheck ?? null }),
  // 4 MiB, as the official SDK servers accept: a tool call that works direct must work through the gateway.
  max_body_bytes: int(1, 1024 * 1024 * 1024, {
    default: 4 * 1024 * 1024,
    description: 'Largest request body read; larger gets 413.',
    restart: (c) => c.limits.maxBodyBytes,
  }),
  // Receiving the request only (headers and body): a streamed response is never cut by it.
  request_timeout_seconds: num(0, 3600, {
    exclusiveMin: true,
    default: 300,
    description: 'Time to receive a whole request (headers and body); past it 408. Never cuts a response.',
    restart: (c) => c.limits.requestTimeoutSeconds,
  }),
  // A tools/call inside a batch has its arguments at depth 4; 64 leaves room for any real argument
  // tree while bounding what a decoder downstream may be asked to recurse through.
  max_json_depth: int(4, 1000, {
    default: 64,
    description: 'Deepest nesting in a POST body; deeper gets 400 before the body is parsed.',
    restart: (c) => c.limits.maxJsonDepth,
  }),
  // 100, as the official SDK servers: a batch is judged, charged and audited element by element.
  max_batch_messages: int(1, 10_000, {
    default: 100,
    description: 'Most JSON-RPC messages in one batch; more gets 400.',
    restart: (c) => c.limits.maxBatchMessages,
  }),
  max_concurrent_per_identity: int(1, 100_000, {
    default: 64,
    description: 'Requests (streams included) one identity may have in flight; past it 429.',
    restart: (c) => c.limits.maxConcurrentPerIdentity,
  }),
  // A day: an expired binding only stops protecting its session (the id then passes unchecked, as
  // one created before a restart), so this trades memory for protection, never availability.
  session_idle_seconds: num(60, 31 * 86_400, {
    default: 86_400,
    description: 'A session unused by the principal that created it for this long is no longer bound to it.',
    restart: (c) => c.limits.sessionIdleSeconds,
  }),
  // ~300 bytes a binding (measured, id and owner strings included): 100 000 is ~30 MB at most.
  max_sessions: int(1, 10_000_000, {
    default: 100_000,
    description: 'Most sessions bound to their creator; when full, the least recently used binding is forgotten.',
    restart: (c) => c.limits.maxSessions,
  }),
  max_sessions_per_identity: int(1, 10_000_000, {
    default: 1000,
    description: "Most sessions bound to one identity; past it, that identity's least recently used binding is forgotten.",
    restart: (c) => c.limits.maxSessionsPerIdentity,
  }),
  allowed_origins: list(origin, {
    description:
      "Browser origins (scheme://host[:port]) allowed to call besides the request's own; any other Origin gets 403 (DNS-rebinding protection). Empty on a loopback listener: loopback origins pass.",
    restart: (c) => c.http.allowedOrigins,
  }),
  allowed_hosts: list(str({ description: 'A host name or IP address with an optional port.' }), {
    description: 'Host header values accepted ([] accepts any): example.com, 127.0.0.1:8080, [::1]:8080.',
    restart: (c) => c.http.allowedHosts,
    guard: { removeWith: 'allowed_hosts: []' },
  }),
  trusted_proxies: list(str({ description: 'An IP address or CIDR block: 10.0.0.0/8, ::1.' }), {
    description: 'Peers whose X-Forwarded-For/-Host/-Proto are kept: IP addresses or CIDR blocks.',
    restart: (c) => c.http.trustedProxies,
  }),
  shutdown_grace_seconds: num(0, 3600, {
    default: 10,
    description: 'On SIGTERM/SIGINT, how long in-flight requests may run before their connections are closed.',
    restart: (c) => c.shutdownGraceSeconds,
  }),
  // 0 by default: a plain process stops at once; behind a load balancer set it above the probe interval.
  shutdown_delay_seconds: num(0, 600, {
    default: 0,
    description: 'On SIGTERM/SIGINT, how long /readyz answers 503 while the gateway still serves.',
    restart: (c) => c.shutdownDelaySeconds,
  }),
  log_level: placed(LOG_LEVEL, { restart: (c) => c.logLevel }),
  log_format: placed(LOG_FORMAT, { restart: (c) => c.logFormat }),
  features: FEATURES,
  audit: AUDIT,
  auth: AUTH,
  budget: BUDGET,
  // The policy file is the same policy kept elsewhere: moving from one to the other loses nothing.
  policy: placed(POLICY, { guard: { removeWith: 'policy: {default: allow, rules: []}', or: ['policy_file'] } }),
  policy_file: str({
    blank: false,
    description: 'A YAML file holding default and rules (relative to this file); instead of the inline policy block.',
  }),
  postgres: POSTGRES,
  tool_refusals: TOOL_REFUSALS,
  admin: ADMIN,
  // The paths only: SIGHUP re-reads the files they name (a renewed certificate) without a restart.
  tls: placed(TLS, { restart: (c) => c.tls }),
  metrics: METRICS,
})
