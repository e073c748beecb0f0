import { CONFIG_SPEC, keyNode, keysOf, metaOf } from './spec'
import type { Config } from './types'

/**
 * Every top-level YAML key a reload cannot apply, with where its value lives in a Config: the keys
 * whose node in the declarative schema (spec.ts) carries a `restart` flag.
 */
export const RESTART_KEYS: ReadonlyArray<readonly [string, (c: Config) => unknown]> = keysOf(CONFIG_SPEC).flatMap((key) => {
  const read = metaOf(keyNode(CONFIG_SPEC, key)).restart
  return read === undefined ? [] : [[key, read] as const]
})

/**
 * The YAML keys whose values differ between two configs but take effect only after a restart (they
 * hold sockets, keys, files or pools). `budget` and `policy` are what a reload applies.
 */
export function keysNeedingRestart(current: Config, next: Config): string[] {
  return RESTART_KEYS.filter(([, read]) => JSON.stringify(read(current)) !== JSON.stringify(read(next))).map(([key]) => key)
}
