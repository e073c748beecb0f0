import { diffConfigs } from '../config/diff'
import { enforcementLost } from '../config/reload-guard'
import { keysNeedingRestart } from '../config/restart-keys'
import type { Config } from '../config/types'
import { ConfigError } from '../errors'
import type { Logger } from '../log'

/** What a reload changes, handed over by compose.ts. */
export interface ReloadTargets {
  readonly log: Logger
  /** Swaps in what the reloadable keys make (every route's chain, the metric labels) for the config now in force. */
  readonly swap: (current: Config) => void
  /** Every feature's reload hook, once the swap is done and logged. */
  readonly onReload: (before: Config, after: Config) => void
}

/**
 * Config reloads (SIGHUP, the admin API): applies a new, already validated Config's `budget`, `policy`
 * and `tool_refusals` to requests that start from now on, and logs what changed. Every other key keeps
 * its startup value until a restart.
 */
export class Reloader {
  /** The config requests run with: the startup one, with the reloadable keys of the last reload. */
  private current: Config
  /** The last config read from the file (current mixes it with startup values): the next reload's diff starts from it. */
  private loaded: Config

  constructor(
    config: Config,
    private readonly targets: ReloadTargets,
  ) {
    this.current = config
    this.loaded = config
  }

  /** The config in force now (a reload changes its `budget`, `policy` and `tool_refusals`). */
  get config(): Config {
    return this.current
  }

  /**
   * Returns the YAML keys that changed but only take effect after a restart; they are left as they
   * were. Throws a ConfigError, changing nothing, when `next` lacks an enforcement key the last file
   * set (config/reload-guard.ts).
   */
  apply(next: Config): string[] {
    const { log } = this.targets
    // Before anything changes: a file read mid-write is valid YAML without its last blocks.
    const lost = enforcementLost(this.loaded, next)
    if (lost.length > 0) throw new ConfigError(lost)
    const restartNeeded = keysNeedingRestart(this.current, next)
    const diff = diffConfigs(this.loaded, next, restartNeeded)
    const before = this.current
    // The server map reloads too, unless the file moved between `upstream:` and `servers:` (a restart key).
    const servers = before.upstream === null && next.upstream === null ? { servers: next.servers, defaultServer: next.defaultServer } : {}
    const current = { ...before, budget: next.budget, policy: next.policy, toolRefusals: next.toolRefusals, ...servers }
    // Swapped before anything is kept: a server that cannot be opened throws, and the config in force,
    // and the one the next reload's diff starts from, stay as they were.
    this.targets.swap(current)
    this.loaded = next
    this.current = current
    // The words say what a reload applied: with servers, the map of servers too.
    const applied = current.upstream === null ? 'servers, budget, policy and tool_refusals' : 'budget, policy and tool_refusals'
    log.info(`configuration reloaded: ${applied} apply to new requests; budget counts kept`, {
      restart_needed_for: restartNeeded,
      ...diff.summary,
    })
    for (const change of diff.changes) log.info('configuration key changed', { ...change })
    if (restartNeeded.length > 0) log.warn('changed settings take effect only after a restart', { keys: restartNeeded })
    this.targets.onReload(before, this.current)
    return restartNeeded
  }
}
