/**
 * Storage keys: a JSON array per bucket. JSON string escaping makes the encoding unambiguous
 * whatever the names hold ("acme\0"+"alice" and "acme"+"\0alice" stay two keys), and it never
 * contains a NUL byte, which Postgres text columns refuse.
 */
/**
 * A tool's bucket: with `servers:` scoped by its server (['tool', server, tool]), with `upstream:` the
 * tool alone (['tool', tool]). The arrays differ in length, and windowKey appends a number where a
 * server-scoped key has its third string, so no tool bucket of one form is a bucket of the other
 * (tool `a/b` on server `x` and tool `b` on `x/a` are distinct arrays, beyond server names holding no `/`).
 */
export function toolKey(tool: string, server: string | null = null): string {
  return JSON.stringify(server === null ? ['tool', tool] : ['tool', server, tool])
}

/** The bucket shared by every caller of one server (budget.servers). */
export function serverKey(server: string): string {
  return JSON.stringify(['server', server])
}

export function tenantKey(tenant: string): string {
  return JSON.stringify(['tenant', tenant])
}

export function identityKey(tenant: string, identity: string): string {
  return JSON.stringify(['identity', tenant, identity])
}

/**
 * The key of one window of a bucket (budget.limits may list several per bucket): the bucket's key with
 * the window length appended to its array, so a window whose length a reload changes starts afresh
 * under a new key while an unchanged one keeps its count.
 */
export function windowKey(bucketKey: string, windowSeconds: number): string {
  return `${bucketKey.slice(0, -1)},${JSON.stringify(windowSeconds)}]`
}

/**
 * The identity tier's window keys (windowKey of identityKey), built once per caller instead of on
 * every call: the same strings, without a JSON.stringify and a concatenation per window and request.
 * Callers are attacker-chosen in header mode and unbounded in number anyway, so the cache forgets
 * everyone once it holds `maxCallers`: the next call of each builds its keys again, as before. Full,
 * the default holds ~3 MB with one identity window, ~5 MB with two (measured on Node 20, 30-character
 * identities).
 */
export class IdentityKeyCache {
  private readonly byTenant = new Map<string, Map<string, readonly string[]>>()
  private callers = 0

  constructor(
    private readonly windowsSeconds: readonly number[],
    private readonly maxCallers = 10_000,
  ) {}

  /** Callers whose keys are held (tests). */
  get size(): number {
    return this.callers
  }

  /** One key per window of `windowsSeconds`, in its order. */
  keysOf(tenant: string, identity: string): readonly string[] {
    const known = this.byTenant.get(tenant)?.get(identity)
    if (known !== undefined) return known
    if (this.callers >= this.maxCallers) {
      this.byTenant.clear()
      this.callers = 0
    }
    let identities = this.byTenant.get(tenant)
    if (identities === undefined) this.byTenant.set(tenant, (identities = new Map<string, readonly string[]>()))
    const bucket = identityKey(tenant, identity)
    const keys = this.windowsSeconds.map((w) => windowKey(bucket, w))
    identities.set(identity, keys)
    this.callers++
    return keys
  }
}
