import { isIP } from 'node:net'
import type { TSchema } from '@sinclair/typebox'
import { dirname, isAbsolute, resolve } from 'node:path'
import { ConfigError } from '../errors'
import { readAdmin } from './admin'
import { readMetrics } from './metrics'
import { readTls } from './tls'
import { readAuth } from './auth'
import { readBudget } from './budget'
import { expandEnv } from './env'
import { readHealthCheck } from './health-check'
import { readUpstreams } from './servers'
import { checkPolicyServers, readPolicy } from './policy'
import { isUnterminated, setConfigOrigin } from './origin'
import { readPostgres } from './postgres'
import { readBlock, readKey, readLeaf } from './read-node'
import { AUDIT, CONFIG_SPEC, FEATURES, TLS, keyNode } from './spec'
import { Reader, deepFreeze, parseYaml, readText } from './reader'
import type { AdminConfig, AuditConfig, AuthConfig, Config, Features, HttpConfig, LogFormat, PostgresConfig } from './types'

export interface LoadOptions {
  readonly env?: NodeJS.ProcessEnv
  /** Relative paths in the file (audit.output, policy_file, key files) resolve against this. */
  readonly baseDir?: string
  /** The file the text came from, for messages that say where to change a key (config/origin.ts). */
  readonly file?: string
}

/** Reads, expands and validates a config file. Throws one ConfigError listing every problem. */
export function loadConfig(path: string, env: NodeJS.ProcessEnv = process.env): Config {
  const file = readText(path)
  if ('problem' in file) throw new ConfigError([`${path}: ${file.problem}`])
  return parseConfig(file.text, { env, baseDir: dirname(resolve(path)), file: path })
}

export function parseConfig(text: string, options: LoadOptions = {}): Config {
  const parsed = parseYaml(text)
  if ('problem' in parsed) throw new ConfigError([parsed.problem])
  const r = new Reader()
  const expanded = expandEnv(parsed.tree ?? {}, '', options.env ?? process.env, r)
  const config = readConfig(r, expanded, options.baseDir ?? process.cwd())
  if (r.problems.length > 0) throw new ConfigError(r.problems)
  // The expanded tree travels beside the Config (never in it): a reload diffs it in YAML keys.
  return setConfigOrigin(deepFreeze(config), {
    file: options.file ?? null,
    tree: deepFreeze(expanded),
    variables: r.variables,
    unterminated: isUnterminated(text),
  })
}

/**
 * What loadConfigBlocks can read alone, by top-level key: each with the same reader the whole file
 * uses. Which blocks these are is the commands' choice, not a key's property, so it is not a mark in
 * spec.ts; the keys are checked against it (a key the schema lacks does not compile).
 */
const BLOCK_READERS = {
  auth: (r: Reader, node: unknown, resolvePath: (p: string) => string): AuthConfig => readAuth(r, node, resolvePath),
  log_format: (r: Reader, node: unknown): LogFormat => readLogFormat(r, node),
  // `wardline audit` needs only where the trail is: not the JWT secret's variable.
  features: (r: Reader, node: unknown): Features => readFeatures(r, node),
  audit: (r: Reader, node: unknown, resolvePath: (p: string) => string): AuditConfig => readAudit(r, node, resolvePath),
  postgres: (r: Reader, node: unknown): PostgresConfig | null => readPostgres(r, node),
  // `wardline revoke` and `wardline budget`: where the admin API listens and its token (read alone, the
  // block cannot compare admin.listen with listen; serve and check-config do).
  admin: (r: Reader, node: unknown, resolvePath: (p: string) => string): AdminConfig | null => readAdmin(r, node, null, resolvePath),
} satisfies {
  readonly [K in keyof typeof CONFIG_SPEC.properties]?: (r: Reader, node: unknown, resolvePath: (p: string) => string) => unknown
}
export type ConfigBlocks = { readonly [K in keyof typeof BLOCK_READERS]: ReturnType<(typeof BLOCK_READERS)[K]> }

/**
 * Reads only the named top-level keys of a config file: `${VAR}` expansion, validation and the
 * resulting values exactly as loadConfig gives them, but nothing else of the file is expanded or
 * checked. `wardline token` needs the auth block and must not fail because postgres.dsn reads a
 * variable this shell does not set. Throws one ConfigError listing the problems of those keys only.
 */
export function loadConfigBlocks<K extends keyof ConfigBlocks>(
  path: string,
  keys: readonly K[],
  env: NodeJS.ProcessEnv = process.env,
): Pick<ConfigBlocks, K> {
  const file = readText(path)
  if ('problem' in file) throw new ConfigError([`${path}: ${file.problem}`])
  const parsed = parseYaml(file.text)
  if ('problem' in parsed) throw new ConfigError([parsed.problem])
  const r = new Reader()
  const tree = parsed.tree ?? {}
  if (typeof tree !== 'object' || Array.isArray(tree)) throw new ConfigError(['the configuration must be a mapping of keys'])
  const baseDir = dirname(resolve(path))
  const resolvePath = (p: string): string => (isAbsolute(p) ? p : resolve(baseDir, p))
  const out: Partial<Record<K, unknown>> = {}
  for (const key of keys) {
    const node = Object.hasOwn(tree, key) ? (tree as Record<string, unknown>)[key] : undefined
    out[key] = BLOCK_READERS[key](r, expandEnv(node, key, env, r), resolvePath)
  }
  if (r.problems.length > 0) throw new ConfigError(r.problems)
  return deepFreeze(out as Pick<ConfigBlocks, K>)
}

function readLogFormat(r: Reader, value: unknown): LogFormat {
  return readKey(r, CONFIG_SPEC, { log_format: value }, 'log_format', '')
}

/** The whole file's reading: each block by its node in the declarative schema (spec.ts), then the cross-field rules. */
export function readConfig(r: Reader, tree: unknown, baseDir: string): Config {
  if (typeof tree !== 'object' || tree === null || Array.isArray(tree)) {
    r.note('', 'the configuration must be a mapping of keys')
    tree = {}
  }
  const o = readBlock(r, CONFIG_SPEC, tree, '')
  const resolvePath = (p: string): string => (isAbsolute(p) ? p : resolve(baseDir, p))

  const listen = readListen(r, o.listen, 'listen')
  const { upstream, servers, defaultServer } = readUpstreams(r, o, {
    timeoutSeconds: readKey(r, CONFIG_SPEC, o, 'upstream_timeout_seconds', ''),
    connections: readKey(r, CONFIG_SPEC, o, 'upstream_connections', ''),
    healthCheck: readHealthCheck(r, o.upstream_health_check, 'upstream_health_check'),
  })

  const features = readFeatures(r, o.features)
  const audit = readAudit(r, o.audit, resolvePath)
  const postgres = readPostgres(r, o.postgres)
  const admin = readAdmin(r, o.admin, listen, resolvePath)
  const config: Config = {
    listen,
    upstream,
    servers,
    defaultServer,
    limits: {
      // 4 MiB, as the official SDK servers accept: a tool call that works direct must work through the gateway.
      maxBodyBytes: readKey(r, CONFIG_SPEC, o, 'max_body_bytes', ''),
      // A tools/call inside a batch has its arguments at depth 4; 64 leaves room for any real argument
      // tree while bounding what a decoder downstream may be asked to recurse through.
      maxJsonDepth: readKey(r, CONFIG_SPEC, o, 'max_json_depth', ''),
      // 100, as the official SDK servers: a batch is judged, charged and audited element by element.
      maxBatchMessages: readKey(r, CONFIG_SPEC, o, 'max_batch_messages', ''),
      maxConcurrentPerIdentity: readKey(r, CONFIG_SPEC, o, 'max_concurrent_per_identity', ''),
      // Receiving the request only (headers and body): a streamed response is never cut by it.
      requestTimeoutSeconds: readKey(r, CONFIG_SPEC, o, 'request_timeout_seconds', ''),
      // A day: an expired binding only stops protecting its session (the id then passes unchecked, as
      // one created before a restart), so this trades memory for protection, never availability.
      sessionIdleSeconds: readKey(r, CONFIG_SPEC, o, 'session_idle_seconds', ''),
      // ~300 bytes a binding (measured, id and owner strings included): 100 000 is ~30 MB at most.
      maxSessions: readKey(r, CONFIG_SPEC, o, 'max_sessions', ''),
      maxSessionsPerIdentity: readKey(r, CONFIG_SPEC, o, 'max_sessions_per_identity', ''),
    },
    http: readHttp(r, o, listen),
    shutdownGraceSeconds: readKey(r, CONFIG_SPEC, o, 'shutdown_grace_seconds', ''),
    // 0 by default: a plain process stops at once; behind a load balancer set it above the probe interval.
    shutdownDelaySeconds: readKey(r, CONFIG_SPEC, o, 'shutdown_delay_seconds', ''),
    logLevel: readKey(r, CONFIG_SPEC, o, 'log_level', ''),
    logFormat: readLogFormat(r, o.log_format),
    features,
    audit,
    auth: readAuth(r, o.auth, resolvePath),
    // With servers:, tool keys and server buckets name servers; with upstream: (or neither) they cannot.
    budget: readBudget(
      r,
      o.budget,
      'budget',
      upstream === null && o.servers !== undefined && o.servers !== null ? servers.map((s) => s.name) : null,
    ),
    policy: readPolicy(r, o.policy, o.policy_file, resolvePath),
    postgres,
    // `http` by default: what clients got before the key existed, and what budget.md documents.
    toolRefusals: readKey(r, CONFIG_SPEC, o, 'tool_refusals', ''),
    admin,
    tls: readTls(r, o.tls, 'tls', resolvePath, TLS),
    metrics: readMetrics(r, o.metrics, listen, admin),
  }

  // Cross-field rules, after the shapes are known.
  if (upstream !== null || servers.length > 0) checkPolicyServers(r, config.policy, upstream !== null ? null : servers.map((s) => s.name))
  if (features.postgresStorage && postgres === null) r.note('postgres.dsn', 'is required when features.postgres_storage is true')
  if (audit.output === null && !features.postgresStorage) {
    r.note('audit.output', 'is required unless features.postgres_storage is true (every decision needs a sink)')
  }
  if (audit.retentionDays !== null && !features.postgresStorage) {
    // Silently keeping a JSONL file forever while the config says 30 days would be worse than refusing.
    r.note(
      'audit.retention_days',
      'applies only to the Postgres audit_entries table (features.postgres_storage: true); rotate a JSONL audit file with logrotate instead (docs/operations.md, retention)',
    )
  }
  return config
}

function readListen(r: Reader, value: unknown, path: string): Config['listen'] {
  const text = readLeaf(r, keyNode(CONFIG_SPEC, 'listen'), value, path) as string
  const match = /^(\[[^\]]+\]|[^:\s]+):(\d{1,5})$/.exec(text)
  if (!match) {
    r.note(path, 'must be host:port (e.g. 0.0.0.0:8080)')
    return { host: '127.0.0.1', port: 8080 }
  }
  const port = Number(match[2])
  if (port > 65535) r.note(path, 'port must be between 0 and 65535')
  return { host: match[1].replace(/^\[|\]$/g, ''), port }
}

function readHttp(r: Reader, o: Record<string, unknown>, listen: Config['listen']): HttpConfig {
  const strings = (key: 'allowed_origins' | 'allowed_hosts' | 'trusted_proxies', check: (value: string) => string | null): string[] => {
    const out: string[] = []
    const item = (keyNode(CONFIG_SPEC, key) as unknown as { items: TSchema }).items
    r.list(o[key], key).forEach((node, i) => {
      const value = readLeaf(r, item, node, `${key}[${i}]`, '') as string
      if (value === '') return
      const problem = check(value)
      if (problem !== null) r.note(`${key}[${i}]`, problem)
      else out.push(value.toLowerCase())
    })
    return out
  }
  const allowedOrigins = strings('allowed_origins', checkOrigin)
  return {
    allowedOrigins,
    // A listed origin set is the operator's whole answer; unset, a loopback gateway is reached by pages
    // on this machine only (the MCP Inspector's), which could reach it without a browser anyway.
    loopbackOrigins: allowedOrigins.length === 0 && isLoopbackAddress(listen.host),
    allowedHosts: strings('allowed_hosts', checkHost),
    trustedProxies: strings('trusted_proxies', checkProxy),
  }
}

/** `localhost`, 127.0.0.0/8 or ::1: an address only this machine can connect to. */
function isLoopbackAddress(host: string): boolean {
  const lower = host.toLowerCase()
  return lower === 'localhost' || lower === '::1' || (isIP(lower) === 4 && lower.startsWith('127.'))
}

/** An origin as browsers send it (RFC 6454 serialization): scheme://host[:port], nothing after; or `null`. */
function checkOrigin(value: string): string | null {
  if (value === 'null') return null
  if (!URL.canParse(value)) return 'must be an origin such as https://app.example.com (scheme, host, optional port)'
  const url = new URL(value)
  if (url.origin === 'null' || url.origin !== value.toLowerCase()) {
    return `must be an origin such as https://app.example.com (scheme, host, optional port; no path or trailing slash), not ${JSON.stringify(value)}`
  }
  return null
}

/** A Host header value: a name or IP literal, with an optional port. */
function checkHost(value: string): string | null {
  const match = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$/.exec(value)
  if (match === null || (match[2] !== undefined && Number(match[2]) > 65535)) {
    return 'must be a host name or IP address with an optional port (example.com, 127.0.0.1:8080, [::1]:8080)'
  }
  return null
}

/** An IPv4 or IPv6 address, optionally a CIDR block. */
function checkProxy(value: string): string | null {
  const [address, bits, extra] = value.split('/')
  const family = isIP(address)
  const max = family === 4 ? 32 : 128
  if (family === 0 || extra !== undefined || (bits !== undefined && !(/^\d{1,3}$/.test(bits) && Number(bits) <= max))) {
    return 'must be an IP address or a CIDR block (10.0.0.0/8, ::1)'
  }
  return null
}

function readFeatures(r: Reader, value: unknown, path = 'features'): Features {
  const o = readBlock(r, FEATURES, value, path)
  return {
    budgetEnforcement: readKey(r, FEATURES, o, 'budget_enforcement', path),
    postgresStorage: readKey(r, FEATURES, o, 'postgres_storage', path),
  }
}

function readAudit(r: Reader, value: unknown, resolvePath: (p: string) => string, path = 'audit'): AuditConfig {
  const o = readBlock(r, AUDIT, value, path)
  const hasOutput = value === undefined || value === null || !('output' in o) || o.output !== null
  const output = hasOutput ? readKey(r, AUDIT, o, 'output', path) : null
  return {
    output: output === null || output === 'stdout' ? output : resolvePath(output),
    spillFile: resolvePath(readKey(r, AUDIT, o, 'spill_file', path)),
    maxQueueEntries: readKey(r, AUDIT, o, 'max_queue_entries', path),
    // Absent or null: keep every row (deleting audit data is the operator's decision, never a default).
    retentionDays: o.retention_days === undefined || o.retention_days === null ? null : readKey(r, AUDIT, o, 'retention_days', path),
  }
}
