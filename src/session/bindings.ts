/** Who created a session: the verified caller of the request whose answer carried its id. */
export interface SessionOwner {
  readonly tenant: string
  readonly identity: string
}

interface Binding extends SessionOwner {
  /** The canonical id (sessionKey): its key in its server's map. */
  readonly key: string
  /** The scope of the server whose answer created it (Exchange.sessionScope: its upstream's origin); null with `upstream:` alone. */
  readonly server: string | null
  /** ownerKey(tenant, identity). */
  readonly owner: string
  /** Last time the owner used it (clock ms): the idle expiry counts from here. */
  seenAtMs: number
  /**
   * The upstream handed the same id to two principals (a server with one session for everyone): it
   * is theirs to share, so it is never refused, and it stays remembered so a third creation does not
   * turn it back into a binding.
   */
  shared: boolean
  /** The owner's streams of this session open now (GET streams, the legacy /sse stream): while any is, it does not idle out. */
  streams: number
}

export interface SessionLimits {
  /** A binding not used by its owner for this long is forgotten. */
  readonly idleMs: number
  /** Most bindings held; when full, the least recently used one is forgotten. */
  readonly maxSessions: number
  /** Most bindings one principal holds; past it, that principal's least recently used one is forgotten. */
  readonly maxPerIdentity: number
}

/** Why a binding was forgotten before its owner deleted the session or it idled out. */
export type Eviction = 'full' | 'identity_full'

/**
 * Which principal created which session id at which server, learnt from the upstream's answers
 * (session/stage.ts): bounded in memory, forgotten after `idleMs` without use by the owner, on a
 * successful DELETE, and least recently used first when a cap is reached.
 *
 * Each server makes its own ids, and two may make the same one: bindings are held per server (the
 * routed server's session scope, its upstream's origin, so that two names in front of one upstream
 * share them; null with `upstream:` alone), so an id one server issued says nothing about the same id
 * at another, neither who owns it nor that it is shared. One map per server, not one map
 * of `server + id` keys: a lookup then builds no string (a request per session pays for it).
 *
 * Recency is kept by re-inserting a binding into its insertion-ordered server map and owner set when
 * its owner uses it (at most once per TOUCH_MS, so a busy session costs a lookup, not two deletes and
 * inserts per request): the first entry of each is then its least recently used one, which is what
 * both the idle sweep and the eviction need, with no timer and no sorted structure. The least recently
 * used binding of anyone is the oldest of the servers' first entries (a few servers, looked at only
 * when the cap is reached).
 */
export class SessionBindings {
  /** Server → its bindings by canonical id, least recently used first. */
  private readonly byServer = new Map<string | null, Map<string, Binding>>()
  /** ownerKey → that principal's bindings, least recently used first. */
  private readonly byOwner = new Map<string, Set<Binding>>()
  private count = 0

  constructor(
    private readonly limits: SessionLimits,
    private readonly now: () => number = Date.now,
    /** Hears each binding forgotten early because a cap was reached (a metric, a rate-limited warning). */
    private readonly onEvicted: (cause: Eviction) => void = () => undefined,
  ) {}

  get size(): number {
    return this.count
  }

  /**
   * The session `id` was created at `server` for `owner`. Called before the answer that names it
   * reaches the client, so no request can present the id before it is bound.
   */
  bind(id: string, owner: SessionOwner, server: string | null = null): void {
    const key = sessionKey(id)
    const t = this.now()
    this.sweep(t)
    const okey = ownerKey(owner.tenant, owner.identity)
    const known = this.byServer.get(server)?.get(key)
    if (known !== undefined) {
      if (known.owner !== okey) known.shared = true
      this.touch(known, t)
      return
    }
    let own = this.byOwner.get(okey)
    if (own === undefined) this.byOwner.set(okey, (own = new Set<Binding>()))
    if (own.size >= this.limits.maxPerIdentity) {
      this.forget(own.values().next().value as Binding)
      this.onEvicted('identity_full')
    } else if (this.count >= this.limits.maxSessions) {
      this.forget(this.leastRecentlyUsed())
      this.onEvicted('full')
    }
    const binding: Binding = {
      key,
      server,
      owner: okey,
      tenant: owner.tenant,
      identity: owner.identity,
      seenAtMs: t,
      shared: false,
      streams: 0,
    }
    // The eviction above may have removed this server's or this principal's last binding, and its map with it.
    let ids = this.byServer.get(server)
    if (ids === undefined) this.byServer.set(server, (ids = new Map<string, Binding>()))
    ids.set(key, binding)
    this.count++
    if (!this.byOwner.has(okey)) this.byOwner.set(okey, own)
    own.add(binding)
  }

  /**
   * Whether `id` may be used at `server` by `caller`: true when it is unknown there (never seen
   * created, idled out, forgotten, or on another replica; the upstream judges it), shared, or the
   * caller's own (which counts as a use). False when another principal created it at that server.
   */
  allows(id: string, caller: SessionOwner, server: string | null = null): boolean {
    const binding = this.find(server, id)
    if (binding === undefined) return true
    const t = this.now()
    if (binding.streams === 0 && t - binding.seenAtMs >= this.limits.idleMs) {
      this.forget(binding)
      return true
    }
    if (binding.shared) return true
    if (binding.tenant !== caller.tenant || binding.identity !== caller.identity) return false
    this.touch(binding, t)
    return true
  }

  /**
   * The owner opened a stream of the session (true), which keeps the binding from idling out until
   * `unpin`: a client listening on its GET stream for days without a request is still using it.
   * False when `id` is not the caller's binding (nothing to keep).
   */
  pin(id: string, caller: SessionOwner, server: string | null = null): boolean {
    const binding = this.find(server, id)
    if (binding === undefined || binding.tenant !== caller.tenant || binding.identity !== caller.identity) return false
    binding.streams++
    return true
  }

  /** A stream `pin` counted has ended; its end counts as a use. */
  unpin(id: string, server: string | null = null): void {
    const binding = this.find(server, id)
    if (binding === undefined || binding.streams === 0) return
    binding.streams--
    this.touch(binding, this.now())
  }

  /** The owner deleted the session (the upstream answered its DELETE with a 2xx). */
  release(id: string, caller: SessionOwner, server: string | null = null): void {
    const binding = this.find(server, id)
    if (binding !== undefined && binding.tenant === caller.tenant && binding.identity === caller.identity) this.forget(binding)
  }

  /**
   * The binding of `id` at `server` in any spelling. Keys are canonical, so an id that is a key (what
   * its owner sends, as the upstream made it) is found by one lookup; only other spellings pay for sessionKey.
   */
  private find(server: string | null, id: string): Binding | undefined {
    const ids = this.byServer.get(server)
    if (ids === undefined) return undefined
    const exact = ids.get(id)
    if (exact !== undefined) return exact
    const key = sessionKey(id)
    return key === id ? undefined : ids.get(key)
  }

  /** The least recently used binding of anyone (there is one: called only when the cap is reached). */
  private leastRecentlyUsed(): Binding {
    let oldest: Binding | undefined
    for (const ids of this.byServer.values()) {
      const first = ids.values().next().value as Binding
      if (oldest === undefined || first.seenAtMs < oldest.seenAtMs) oldest = first
    }
    return oldest as Binding
  }

  /**
   * The bindings idle for idleMs or longer, least recently used first, are forgotten. One with a stream
   * open goes to the back as if just used (the loop meets it again, no longer idle, and stops there).
   */
  private sweep(t: number): void {
    for (const ids of this.byServer.values()) {
      for (const binding of ids.values()) {
        if (t - binding.seenAtMs < this.limits.idleMs) break
        if (binding.streams > 0) this.touch(binding, t)
        else this.forget(binding)
      }
    }
  }

  private touch(binding: Binding, t: number): void {
    if (t - binding.seenAtMs < TOUCH_MS) return
    binding.seenAtMs = t
    const ids = this.byServer.get(binding.server)
    if (ids !== undefined) {
      ids.delete(binding.key)
      ids.set(binding.key, binding)
    }
    const own = this.byOwner.get(binding.owner)
    if (own !== undefined) {
      own.delete(binding)
      own.add(binding)
    }
  }

  private forget(binding: Binding): void {
    const ids = this.byServer.get(binding.server)
    if (ids === undefined || ids.get(binding.key) !== binding) return
    ids.delete(binding.key)
    this.count--
    if (ids.size === 0) this.byServer.delete(binding.server)
    const own = this.byOwner.get(binding.owner)
    if (own === undefined) return
    own.delete(binding)
    if (own.size === 0) this.byOwner.delete(binding.owner)
  }
}

/**
 * How stale a binding's recency may get: the idle expiry and the LRU order are exact to this much.
 * Far below any sensible session_idle_seconds (at least 60 s).
 */
const TOUCH_MS = 1000

/** Collision-free whatever the strings hold: the tenant's length leads. */
function ownerKey(tenant: string, identity: string): string {
  return `${tenant.length}:${tenant}${identity}`
}

/**
 * The key a session id is remembered and looked up under. The official Python SDK's legacy SSE
 * transport reads its `session_id` query parameter with `uuid.UUID(hex=…)`, which accepts one UUID in
 * many spellings (upper case, hyphens anywhere, braces, a `urn:uuid:` prefix, `+`, underscores, other
 * scripts' digits); a refusal keyed on the exact text would let a second spelling of someone else's
 * id through. So every id that parser reads as a UUID is keyed by its value, written lower-case
 * 8-4-4-4-12; any other id by its exact text. Refusing a spelling the
 * upstream itself would not accept costs nothing: it would have been unknown there.
 */
export function sessionKey(id: string): string {
  if (isHyphenatedUuid(id)) return id
  const hex = uuidValue(id)
  if (hex === null) return id
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

/**
 * The form keys take, lower-case 8-4-4-4-12, is the one the TypeScript SDK's randomUUID() ids
 * already have: the common id is its own key, checked without a copy (a request per session pays this).
 */
function isHyphenatedUuid(id: string): boolean {
  if (id.length !== 36) return false
  for (let i = 0; i < 36; i++) {
    const c = id.charCodeAt(i)
    if (i === 8 || i === 13 || i === 18 || i === 23) {
      if (c !== 0x2d) return false
    } else if (!((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66))) return false
  }
  return true
}

/** Python's `uuid.UUID(hex=text)` (CPython 3.8-3.13, Lib/uuid.py) as 32 lower-case hex digits, or null where it raises. */
function uuidValue(text: string): string | null {
  // Shortest accepted spelling: 32 digits. Most ids that are not UUIDs end here.
  if (text.length < 32) return null
  const plain = plainHex(text)
  if (plain !== undefined) return plain
  let hex = text.replaceAll('urn:', '').replaceAll('uuid:', '')
  hex = stripBraces(hex).replaceAll('-', '')
  // Python counts code points: a digit outside the BMP is one character there, two here.
  if (hex.length !== 32 && [...hex].length !== 32) return null
  return pythonHexInt(hex)
}

/**
 * The spellings SDKs generate (randomUUID's 8-4-4-4-12, uuid4().hex), without the general parse: only
 * lower-case hex digits and hyphens. Undefined when the text holds anything else (the general parse
 * decides); for these characters Python drops the hyphens and reads the 32 digits, or raises.
 */
function plainHex(text: string): string | null | undefined {
  let digits = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if ((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66)) digits++
    else if (c !== 0x2d) return undefined
  }
  if (digits !== 32) return null
  return digits === text.length ? text : text.replaceAll('-', '')
}

function stripBraces(text: string): string {
  let start = 0
  let end = text.length
  while (start < end && (text[start] === '{' || text[start] === '}')) start++
  while (end > start && (text[end - 1] === '{' || text[end - 1] === '}')) end--
  return text.slice(start, end)
}

/**
 * Python's `int(text, 16)` for a text of 32 characters, as 32 hex digits, or null where it raises:
 * surrounding whitespace, a `+` (the hyphens, and with them `-`, are gone), an optional `0x`, digits
 * with single underscores between them; any script's decimal digits count as 0-9 (Python converts
 * Unicode decimals and spaces to ASCII first). With at most 32 digits the value always fits a UUID.
 */
function pythonHexInt(text: string): string | null {
  let ascii = ''
  for (const c of text) {
    if (c <= '\x7f') ascii += c
    else if (/^\s$/u.test(c)) ascii += ' '
    else if (/^\p{Nd}$/u.test(c)) ascii += String(decimalValue(c))
    else ascii += c
  }
  let body = ascii.trim()
  if (body.startsWith('+')) body = body.slice(1)
  if (/^0x_?/i.test(body)) body = body.replace(/^0x_?/i, '')
  if (!/^[0-9a-f]+(?:_[0-9a-f]+)*$/i.test(body)) return null
  const digits = body.replaceAll('_', '').replace(/^0+/, '').toLowerCase()
  return digits.padStart(32, '0')
}

/**
 * The value of a Unicode decimal digit (General_Category Nd): Unicode allocates them in runs of ten
 * from zero to nine (Unicode §4.6), so it is the distance from the run's start, modulo ten.
 */
function decimalValue(c: string): number {
  const cp = c.codePointAt(0) as number
  let start = cp
  while (start > 0 && /^\p{Nd}$/u.test(String.fromCodePoint(start - 1))) start--
  return (cp - start) % 10
}
