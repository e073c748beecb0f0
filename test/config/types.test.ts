/**
 * The Config types (config/types.ts) are written by hand, camelCase, because the Config is not the
 * file's shape. What `tsc` checks here is that every key of the declarative schema (config/spec.ts)
 * has a field in the type its block is read into: a key added to spec.ts without a place in the
 * Config does not compile, and its error names the key. The few keys read into another shape are
 * named below with where they go. (That a reader reads each key is test/config/schema.test.ts's: a
 * key nothing reads accepts a wrong value, and fails there.)
 */
import type {
  ADMIN,
  AUDIT,
  AUTH,
  BUDGET,
  CONFIG_SPEC,
  FEATURES,
  HEALTH_CHECK,
  JWT,
  METRICS,
  POLICY,
  POSTGRES,
  TLS,
} from '../../src/config/spec'
import type {
  AdminConfig,
  AuditConfig,
  BucketLimit,
  BudgetConfig,
  Config,
  Features,
  HealthCheckConfig,
  HttpConfig,
  JwtAuthConfig,
  JwtConfig,
  MetricsConfig,
  PolicyConfig,
  PolicyRule,
  PostgresConfig,
  RepeatLimit,
  ResourceMetadata,
  TlsConfig,
  ToolBudget,
  UpstreamConfig,
} from '../../src/config/types'

/** `max_body_bytes` → `maxBodyBytes`. */
type Camel<S extends string> = S extends `${infer Head}_${infer Tail}` ? `${Head}${Capitalize<Camel<Tail>>}` : S

type KeysOf<Block> = Block extends { properties: infer P } ? keyof P & string : never
type ItemOf<List> = List extends { items: infer T } ? T : never
type EntryOf<Named> = Named extends { patternProperties: Record<string, infer T> } ? T : never

/** The keys of `Block` (but `Elsewhere`) without a camelCase field in `T`. */
type Missing<Block, T, Elsewhere extends string = never> = {
  [K in Exclude<KeysOf<Block>, Elsewhere>]: Camel<K> extends keyof T ? never : K
}[Exclude<KeysOf<Block>, Elsewhere>]

/** A top-level key's field: in Config, its limits, its HTTP checks, or `upstream_*` in its upstream. */
type TopLevelMissing<K extends string> =
  Camel<K> extends keyof Config | keyof Config['limits'] | keyof HttpConfig
    ? never
    : K extends `upstream_${infer Rest}`
      ? Camel<Rest> extends keyof UpstreamConfig
        ? never
        : K
      : K

type Budget = (typeof BUDGET)['properties']
type Rule = ItemOf<(typeof POLICY)['properties']['rules']>

/**
 * Each property names the keys a block's type lacks: `never` when it has them all. The Record below
 * then needs no field; a key left without one makes it require a field of that key's name.
 */
interface Unplaced {
  // policy_file is read into `policy` (the same Config field as the inline block).
  top: { [K in Exclude<KeysOf<typeof CONFIG_SPEC>, 'policy_file'>]: TopLevelMissing<K> }[Exclude<KeysOf<typeof CONFIG_SPEC>, 'policy_file'>]
  features: Missing<typeof FEATURES, Features>
  audit: Missing<typeof AUDIT, AuditConfig>
  auth: Missing<typeof AUTH, JwtAuthConfig>
  resourceMetadata: Missing<(typeof AUTH)['properties']['resource_metadata'], ResourceMetadata>
  jwt: Missing<typeof JWT, JwtConfig>
  postgres: Missing<typeof POSTGRES, PostgresConfig>
  admin: Missing<typeof ADMIN, AdminConfig>
  tls: Missing<typeof TLS, TlsConfig>
  metrics: Missing<typeof METRICS, MetricsConfig>
  // enabled: false reads as no health check at all (`healthCheck: null`).
  healthCheck: Missing<typeof HEALTH_CHECK, HealthCheckConfig, 'enabled'>
  // The single window pair and `limits` both become `limits`, a list of windows.
  budget: Missing<typeof BUDGET, BudgetConfig, 'requests_per_window' | 'window_seconds'>
  window: Missing<ItemOf<Budget['limits']>, BucketLimit>
  tool: Missing<EntryOf<Budget['tools']>, ToolBudget, 'requests_per_window' | 'window_seconds'>
  repeatLimit: Missing<Budget['repeat_limit'], RepeatLimit>
  policy: Missing<typeof POLICY, PolicyConfig>
  // A rule's `tool` is its target: a tool name, a resource URI or a prompt name.
  rule: Missing<Rule, PolicyRule, 'tool'>
}

const everyKeyHasAField: { [B in keyof Unplaced]: Record<Unplaced[B], never> } = {
  top: {},
  features: {},
  audit: {},
  auth: {},
  resourceMetadata: {},
  jwt: {},
  postgres: {},
  admin: {},
  tls: {},
  metrics: {},
  healthCheck: {},
  budget: {},
  window: {},
  tool: {},
  repeatLimit: {},
  policy: {},
  rule: {},
}

test('every key of the schema has a field in the Config (checked by tsc; this only runs the file)', () => {
  expect(Object.values(everyKeyHasAField).every((missing) => Object.keys(missing).length === 0)).toBe(true)
})
