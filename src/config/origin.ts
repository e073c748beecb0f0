/**
 * Where a Config came from, kept beside it (never in it: the Config stays the plain frozen shape every
 * stage reads, and JSON.stringify of it shows no YAML). A reload diffs `tree`, so its log speaks YAML
 * keys; a busy port names the `${VAR}` its `listen` was read from.
 */
export interface ConfigOrigin {
  /** The file read, or null for a config parsed from text. */
  readonly file: string | null
  /** The YAML tree after `${VAR}` expansion, before validation (frozen). */
  readonly tree: unknown
  /** Key path (`listen`, `postgres.dsn`) → the variables its value was read from, in order. */
  readonly variables: ReadonlyMap<string, readonly string[]>
  /**
   * The text does not end with a line break: what a file read while it is still being written looks
   * like (a writer flushes blocks, not lines). A reload refuses it (config/reload-guard.ts).
   */
  readonly unterminated: boolean
}

/** Text that is not empty and does not end with a line break (`\n`, so `\r\n` too). */
export function isUnterminated(text: string): boolean {
  return text.length > 0 && !text.endsWith('\n')
}

const ORIGINS = new WeakMap<object, ConfigOrigin>()

export function setConfigOrigin<T extends object>(config: T, origin: ConfigOrigin): T {
  ORIGINS.set(config, origin)
  return config
}

/** The origin of a Config made by the loader; null for one built by hand or copied (`{ ...config }`). */
export function configOrigin(config: object): ConfigOrigin | null {
  return ORIGINS.get(config) ?? null
}

/**
 * How to change a key, for messages: `listen in /etc/wardline.yaml (it reads WARDLINE_LISTEN)`. The
 * variable is named because changing the file's default does nothing while the variable is set.
 */
export function whereToChange(config: object, key: string): string {
  const origin = configOrigin(config)
  const variables = origin?.variables.get(key) ?? []
  const file = origin?.file ? ` in ${origin.file}` : ''
  if (variables.length === 0) return `change ${key}${file}`
  const names = variables.join(', ')
  return `change ${key}${file} (${origin?.file ? 'the file' : 'it'} reads it from ${names}: set ${variables.length === 1 ? 'that variable' : 'those variables'} or edit the key)`
}
