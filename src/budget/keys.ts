/**
 * Storage keys: a JSON array per bucket. JSON string escaping makes the encoding unambiguous
 * whatever the names hold ("acme\0"+"alice" and "acme"+"\0alice" stay two keys), and it never
 * contains a NUL byte, which Postgres text columns refuse.
 */
export function toolKey(tool: string): string {
  return JSON.stringify(['tool', tool])
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
