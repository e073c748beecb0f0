import type { Static } from '@sinclair/typebox'
import type { AUTH, BUDGET, EFFECTS, HEALTH_CHECK, LOG_FORMAT, LOG_LEVEL, TOOL_REFUSALS } from './spec'

// The Config below is camelCase and shaped for the stages (an upstream block where the file has flat
// upstream_* keys, windows as lists); the words a choice key allows are taken from the declarative
// schema (spec.ts), so a new choice is added in one place.

/**
 * The validated, deep-frozen configuration. camelCase here; the YAML keys (snake_case) are known only
 * to the readers in this folder.
 */
export interface Config {
  readonly listen: { readonly host: string; readonly port: number }
  /** `upstream:`: the one server, every path forwarded to it; null when `servers:` names several. */
  readonly upstream: UpstreamConfig | null
  /** `servers:`, in the file's order; empty with `upstream:`. Names are unique. */
  readonly servers: readonly ServerConfig[]
  /** `default_server`: the server also served at `/mcp`; null: `/mcp` alone names none. */
  readonly defaultServer: string | null
  readonly limits: {
    readonly maxBodyBytes: number
    /** Deepest nesting of arrays and objects a POST body may have (the message itself is depth 1). */
    readonly maxJsonDepth: number
    /** Most JSON-RPC messages in one batch. */
    readonly maxBatchMessages: number
    /** Most requests one identity may have between arrival and audit record (streams included). */
    readonly maxConcurrentPerIdentity: number
    /** Longest time to receive a whole request, headers and body (a client trickling a body is cut off). */
    readonly requestTimeoutSeconds: number
    /** A session binding (src/session/) its owner has not used for this long is forgotten. */
    readonly sessionIdleSeconds: number
    /** Most session bindings held; when full, the least recently used is forgotten. */
    readonly maxSessions: number
    /** Most session bindings one identity holds; past it, its own least recently used is forgotten. */
    readonly maxSessionsPerIdentity: number
  }
  readonly http: HttpConfig
  readonly shutdownGraceSeconds: number
  /** After SIGTERM, how long /readyz says 503 while the listener still accepts (load balancers catch up). */
  readonly shutdownDelaySeconds: number
  readonly logLevel: LogLevel
  /** `log_format`: how application logs are written on stderr (log.ts). */
  readonly logFormat: LogFormat
  readonly features: Features
  readonly audit: AuditConfig
  readonly auth: AuthConfig
  readonly budget: BudgetConfig
  readonly policy: PolicyConfig | null
  readonly postgres: PostgresConfig | null
  readonly toolRefusals: ToolRefusals
  /** The admin API (src/admin/); null: no admin listener (the default). */
  readonly admin: AdminConfig | null
  /** `tls`: the main listener speaks HTTPS with these files; null: plain HTTP (the default). */
  readonly tls: TlsConfig | null
  /** `metrics`: /metrics on a listener of its own; null: on the main listener (the default). */
  readonly metrics: MetricsConfig | null
}

/** A listener's certificate files (absolute paths), read at startup and re-read on SIGHUP (net/tls.ts). */
export interface TlsConfig {
  /** PEM: the certificate, then any intermediate certificates of its chain. */
  readonly certFile: string
  /** PEM: the certificate's private key, unencrypted. */
  readonly keyFile: string
  /** PEM: the CAs a client certificate must chain to; null: no client certificate asked for. */
  readonly caFile: string | null
}

/** `metrics:`: where /metrics (and /healthz, /readyz) are served apart from the public listener. */
export interface MetricsConfig {
  readonly listen: { readonly host: string; readonly port: number }
}

/** `admin:`: the admin API's own listener and its bearer token (at least 32 bytes). */
export interface AdminConfig {
  readonly listen: { readonly host: string; readonly port: number }
  /** A secret: never logged, never part of a problem text. */
  readonly token: string
  /** `admin.tls`: the admin API speaks HTTPS with these files (never client certificates); null: plain HTTP. */
  readonly tls: TlsConfig | null
}

/**
 * `tool_refusals`: how a refused tools/call is answered. `http`: an HTTP error (429, 403) with a
 * JSON-RPC error body. `result`: HTTP 200 with a tool result marked isError that a model can read
 * (jsonrpc/refusal-result.ts); every other refusal keeps the HTTP form.
 */
export type ToolRefusals = Static<typeof TOOL_REFUSALS>

/** Who may address the gateway: Host and Origin checks, and whose X-Forwarded-* chain is kept. */
export interface HttpConfig {
  /**
   * Origins (`scheme://host[:port]`, lower-case, or `null`) a request may carry besides its own; a request
   * with any other Origin gets 403.
   */
  readonly allowedOrigins: readonly string[]
  /**
   * `allowed_origins` is empty and `listen` is a loopback address: loopback origins (any port) are
   * accepted, as the official SDK's loopback servers do (http/stage.ts).
   */
  readonly loopbackOrigins: boolean
  /** Host header values (`host` or `host:port`, lower-case) accepted; empty: any. */
  readonly allowedHosts: readonly string[]
  /** Peer addresses (IPs or CIDR blocks) whose X-Forwarded-* headers are extended rather than replaced. */
  readonly trustedProxies: readonly string[]
}

export type LogLevel = Static<typeof LOG_LEVEL>

/** `auto`: a human line per event when stderr is a terminal, else one JSON object per line. */
export type LogFormat = Static<typeof LOG_FORMAT>

export interface UpstreamConfig {
  /** Absolute http(s) URL without a trailing slash; request path and query are appended. */
  readonly url: string
  /** Time allowed until the upstream's response headers arrive. */
  readonly timeoutSeconds: number
  readonly connections: number
  /** The upstream_health_check probe; null when it is off (`enabled: false`). */
  readonly healthCheck: HealthCheckConfig | null
}

/** How a server speaks MCP over HTTP: Streamable HTTP (one endpoint) or the legacy HTTP+SSE pair (2024-11-05). */
export type ServerTransport = 'streamable' | 'sse'

/**
 * One entry of `servers:`. `url` is its MCP endpoint, path included (for `sse`, the URL its GET stream
 * is opened at); `upstream_timeout_seconds`, `upstream_connections` and `upstream_health_check` are its
 * defaults for `timeout_seconds`, `connections` and `health_check`.
 */
export interface ServerConfig extends UpstreamConfig {
  /** `[a-z0-9][a-z0-9_-]{0,31}`: the path segment after /mcp/, and the `server` of its audit entries. */
  readonly name: string
  readonly transport: ServerTransport
  /**
   * Sent on every request to this server, replacing any client-sent header of the same name (names
   * lower-case). Values are secrets: never logged, audited, reported or diffed.
   */
  readonly headers: Readonly<Record<string, string>>
  /**
   * `transport: sse`: the one path on the server's origin its messages are POSTed to (its endpoint
   * event names it); null: any plain path below /mcp/<name> is sent to the origin.
   */
  readonly messagePath: string | null
}

/** Methods a health probe may send: safe ones only (RFC 9110 §9.2.1), so a probe never changes the upstream. */
export type HealthCheckMethod = Static<(typeof HEALTH_CHECK)['properties']['method']>

/** How one upstream is probed (upstream/probe.ts). */
export interface HealthCheckConfig {
  /** upstream_health_check.url; null: the upstream URL itself is probed (and follows it when it changes). */
  readonly url: string | null
  readonly method: HealthCheckMethod
  /** From the start of one probe to the start of the next (or its end, when a probe takes longer). */
  readonly intervalSeconds: number
  /** Bound on one probe, connection and response head included. */
  readonly timeoutSeconds: number
  /** A failing probe makes /readyz answer 503 (false: reported in the body only). */
  readonly affectsReadiness: boolean
}

export interface Features {
  readonly budgetEnforcement: boolean
  readonly postgresStorage: boolean
}

export interface AuditConfig {
  /** 'stdout', a file path, or null (no JSONL output: only valid with Postgres storage). */
  readonly output: string | null
  /** Where entries go when the Postgres sink keeps failing; replayed when it is back. */
  readonly spillFile: string
  /** Entries held in memory per sink before new ones are dropped (and counted). */
  readonly maxQueueEntries: number
  /** Rows of audit_entries older than this many days are deleted (Postgres storage only); null keeps them all. */
  readonly retentionDays: number | null
}

export type AuthConfig = JwtAuthConfig | HeaderAuthConfig

interface AuthCommon {
  /** Advertised on every 401 as `WWW-Authenticate: Bearer resource_metadata="…"` (RFC 9728). */
  readonly resourceMetadataUrl: string | null
  /** Served at /.well-known/oauth-protected-resource when set. */
  readonly resourceMetadata: ResourceMetadata | null
}

export interface ResourceMetadata {
  readonly resource: string
  readonly authorizationServers: readonly string[]
  readonly scopesSupported: readonly string[]
}

export interface HeaderAuthConfig extends AuthCommon {
  readonly mode: Extract<Static<(typeof AUTH)['properties']['mode']>, 'header'>
}

export interface JwtAuthConfig extends AuthCommon {
  readonly mode: Extract<Static<(typeof AUTH)['properties']['mode']>, 'jwt'>
  readonly jwt: JwtConfig
}

export interface JwtConfig {
  /** Exactly one key source is set. */
  readonly secret: string | null
  readonly jwksUrl: string | null
  readonly jwksFile: string | null
  readonly publicKeyFile: string | null
  readonly issuer: string | null
  readonly audience: readonly string[]
  readonly algorithms: readonly string[]
  readonly identityClaim: string
  readonly tenantClaim: string
  readonly requireTenant: boolean
  readonly clockToleranceSeconds: number
  readonly jwksTimeoutSeconds: number
  readonly jwksCacheSeconds: number
  /** Least time between two JWKS refetches triggered by an unknown kid. */
  readonly jwksCooldownSeconds: number
  /** Verified tokens kept so a client reusing its token pays the crypto once; 0 disables. */
  readonly cacheEntries: number
}

/** One window of a bucket: at most requestsPerWindow units in windowSeconds. */
export interface BucketLimit {
  readonly requestsPerWindow: number
  readonly windowSeconds: number
}

/** A tool listed under budget.tools. */
export interface ToolBudget {
  /** The windows of the tool's own bucket, shared by every caller; empty when the tool only has a cost. */
  readonly limits: readonly BucketLimit[]
  /** Units one call of this tool charges to every tier it passes (budget.tools.<tool>.cost). */
  readonly cost: number
  /** With `servers:`, the server of its key (`<server>/<tool>`): it applies to that server's calls only. Null with `upstream:`. */
  readonly server: string | null
  /** The tool's name as calls give it: the key, or with `servers:` the part after `<server>/`. */
  readonly tool: string
}

/** The loop breaker (budget.repeat_limit): one identity, one tool, the same arguments. */
export interface RepeatLimit {
  readonly calls: number
  readonly windowSeconds: number
}

export interface BudgetConfig {
  /** True when the file has a budget: block (startup says it is ignored while the feature is off). */
  readonly configured: boolean
  /** The windows of every identity's bucket (one or more, distinct lengths). */
  readonly limits: readonly BucketLimit[]
  readonly tenants: Readonly<Record<string, readonly BucketLimit[]>>
  /** By key as written: the tool's name, or with `servers:` `<server>/<tool>`. */
  readonly tools: Readonly<Record<string, ToolBudget>>
  /** `budget.servers`: buckets shared by every caller of one server (with `servers:` only), by server name. */
  readonly servers: Readonly<Record<string, readonly BucketLimit[]>>
  /** Null: no loop breaker. */
  readonly repeatLimit: RepeatLimit | null
  /** Bound on one store check, start to verdict (Postgres). */
  readonly checkTimeoutSeconds: number
  /**
   * What a failed or late store check does: admit (`open`), answer 503 (`closed`), or judge the call on
   * this replica at limit ÷ live replicas (`local`, budget/local-limiter.ts).
   */
  readonly onStoreError: Static<(typeof BUDGET)['properties']['on_store_error']>
}

export type Effect = (typeof EFFECTS)[number]

export interface PolicyRule {
  readonly identity: string
  readonly tenant: string | null
  readonly method: string
  /** The rule's `tool:` key: a glob over the call's target (tool name, prompt name or resource URI). */
  readonly target: string
  /** The rule's `server:` key: a glob over the name of the server a call is routed to (`*`: every server, and the one `upstream:`). */
  readonly server: string
  readonly effect: Effect
}

export interface PolicyConfig {
  readonly default: Effect
  readonly rules: readonly PolicyRule[]
  /** Where the rules came from, for logs: the policy file path or 'inline'. */
  readonly source: string
  /** `filter_lists`: answers to tools/list, prompts/list, resources/list and resources/templates/list, and the values of resource completions, show only what the caller may use. */
  readonly filterLists: boolean
}

export interface PostgresConfig {
  readonly dsn: string
  readonly maxConnections: number
}
