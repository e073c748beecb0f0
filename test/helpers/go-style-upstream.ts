import { type RawUpstream, startRawUpstream } from '../e2e/raw-upstream'

/**
 * JSON as a decoder that keeps every key in order, duplicates included (JSON.parse forgets all but
 * the last), so a test can read a body the way another decoder would.
 */
type Value = null | boolean | number | string | Value[] | Entries
interface Entries {
  readonly entries: Array<[string, Value]>
}

function decodeKeepingDuplicates(text: string): Value {
  let i = 0
  const space = (): void => {
    while (/\s/.test(text[i] ?? '')) i++
  }
  const value = (): Value => {
    space()
    const c = text[i]
    if (c === '{') {
      i++
      const entries: Array<[string, Value]> = []
      space()
      if (text[i] === '}') {
        i++
        return { entries }
      }
      for (;;) {
        space()
        const key = value() as string
        space()
        i++ // ':'
        entries.push([key, value()])
        space()
        if (text[i++] === '}') return { entries }
      }
    }
    if (c === '[') {
      i++
      const items: Value[] = []
      space()
      if (text[i] === ']') {
        i++
        return items
      }
      for (;;) {
        items.push(value())
        space()
        if (text[i++] === ']') return items
      }
    }
    // A scalar: find its end and let JSON.parse read it.
    const match = /^("(?:[^"\\]|\\.)*"|[^,\]}\s]+)/.exec(text.slice(i)) as RegExpExecArray
    i += match[0].length
    return JSON.parse(match[0]) as Value
  }
  return value()
}

/** Go's encoding/json matches struct fields case-insensitively (folding ſ to s and K to k); the last match wins. */
function goField(object: Value | undefined, field: string): Value | undefined {
  if (object === null || typeof object !== 'object' || Array.isArray(object)) return undefined
  let found: Value | undefined
  for (const [key, v] of object.entries) if (key.toUpperCase().toLowerCase() === field) found = v
  return found
}

/** Go decodes only a JSON string into a string field; any other value is a type error that leaves the field "". */
function goString(value: Value | undefined): string {
  return typeof value === 'string' ? value : ''
}

export interface Executed {
  readonly method: string
  /** The tool or prompt name, or the resource URI as a WHATWG URL parser resolves it (as the SDK servers do). */
  readonly target: string
}

/** What an upstream decoding like Go's encoding/json would run for this body. */
export function goStyleRead(body: string): Executed[] {
  const tree = decodeKeepingDuplicates(body)
  const messages = Array.isArray(tree) ? tree : [tree]
  return messages.map((m) => {
    const method = goString(goField(m, 'method'))
    const params = goField(m, 'params')
    const uri = goField(params, 'uri')
    const target = typeof uri === 'string' && URL.canParse(uri.trim()) ? new URL(uri.trim()).href : goString(goField(params, 'name'))
    return { method, target }
  })
}

export interface GoStyleUpstream extends RawUpstream {
  /** Every call this upstream ran, in order. */
  readonly executed: Executed[]
}

/**
 * An MCP-ish upstream that reads each POST the way a Go server with case-insensitive keys and a
 * WHATWG URL resolver would, records what it "ran", and answers each request with an empty result.
 */
export async function startGoStyleUpstream(): Promise<GoStyleUpstream> {
  const executed: Executed[] = []
  const raw = await startRawUpstream((req, res, seen) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end()
      return
    }
    const calls = goStyleRead(seen.body)
    executed.push(...calls)
    const tree = JSON.parse(seen.body) as unknown
    const ids = (Array.isArray(tree) ? tree : [tree]).map((m) => (m as { id?: unknown }).id)
    const answers = ids.filter((id) => id !== undefined).map((id) => ({ jsonrpc: '2.0', id, result: { content: [] } }))
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(Array.isArray(tree) ? answers : (answers[0] ?? {})))
  })
  return Object.assign(raw, { executed })
}
