import type { Config } from './config/types'
import type { ReadinessCheck } from './readiness'

/** A resource released at shutdown, after the audit trail is flushed. */
export type Closer = () => Promise<void> | void

/**
 * What a feature adds to the gateway besides the objects it opened. Each feature opens itself from its
 * own folder (`<folder>/open.ts`) and returns one of these; server/compose.ts folds them together in the
 * order they were opened. Every field is optional: a feature contributes only what it has.
 */
export interface Contribution {
  /**
   * Released at shutdown after the audit trail is flushed. Closers of all features are released in
   * reverse order of the folded list: a feature opened first (the Postgres pool) is released last.
   */
  readonly closers?: readonly Closer[]
  /**
   * Listeners of its own (the admin API), closed as soon as shutdown begins, before the gateway drains.
   * Each is in `closers` too, so a startup that fails later releases it.
   */
  readonly listeners?: readonly Closer[]
  /** What /readyz asks about. */
  readonly readiness?: readonly ReadinessCheck[]
  /** Fields of its own in the /readyz body. */
  readonly readyDetails?: () => Record<string, unknown>
  /**
   * After a reload has swapped in the new chain and logged what changed: `before` is the config
   * requests ran with until now, `after` the one they run with from now on.
   */
  readonly onReload?: (before: Config, after: Config) => void
}

/** The contributions of every feature opened so far, in the order they were opened. */
export class Contributions {
  private readonly all: Contribution[] = []

  add<T extends Contribution>(feature: T): T {
    this.all.push(feature)
    return feature
  }

  get closers(): Closer[] {
    return this.all.flatMap((c) => c.closers ?? [])
  }

  get listeners(): Closer[] {
    return this.all.flatMap((c) => c.listeners ?? [])
  }

  get readiness(): ReadinessCheck[] {
    return this.all.flatMap((c) => c.readiness ?? [])
  }

  /** Every feature's /readyz fields, merged in the order the features were opened. */
  readyDetails(): Record<string, unknown> {
    let details: Record<string, unknown> = {}
    for (const c of this.all) if (c.readyDetails !== undefined) details = { ...details, ...c.readyDetails() }
    return details
  }

  onReload(before: Config, after: Config): void {
    for (const c of this.all) c.onReload?.(before, after)
  }

  /** Releases everything folded so far, last opened first, ignoring failures: a startup that failed. */
  async releaseAll(): Promise<void> {
    for (const close of this.closers.reverse()) await Promise.resolve(close()).catch(() => undefined)
  }
}
