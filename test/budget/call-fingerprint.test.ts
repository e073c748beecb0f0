import { callFingerprint } from '../../src/budget/call-fingerprint'

/** The fingerprint of a call of `tool` whose whole arguments value is `text`. */
const fp = (text: string, tool = 'search'): string => callFingerprint(tool, Buffer.from(text), 0, Buffer.byteLength(text))

describe('the loop breaker’s fingerprint of a call’s arguments', () => {
  test('key order and whitespace, at any depth, make no difference', () => {
    const a = fp('{"q":"x","opts":{"limit":5,"tags":["a","b"],"deep":{"z":null,"y":true}}}')
    const b = fp(' {\n "opts" : { "deep" : { "y" : true , "z" : null } , "tags" : [ "a" , "b" ] , "limit" : 5 } ,\t"q" : "x" } ')
    expect(b).toBe(a)
  })

  test('a string is compared by its value, whatever escapes spell it', () => {
    expect(fp('{"q":"\\u00e9t\\u00E9 \\"x\\" \\/"}')).toBe(fp('{"q":"été \\"x\\" /"}'))
    expect(fp('{"\\u0071":1}')).toBe(fp('{"q":1}'))
  })

  test('any different value or array order is a different call', () => {
    const base = fp('{"a":[1,2],"b":"x"}')
    for (const other of [
      '{"a":[2,1],"b":"x"}',
      '{"a":[1,2],"b":"X"}',
      '{"a":[1,2]}',
      '{"a":[1.5,2],"b":"x"}',
      '{"a":[-1,2],"b":"x"}',
      '{"a":[1,2],"b":"x","c":null}',
      '{"a":["1",2],"b":"x"}',
    ]) {
      expect(fp(other)).not.toBe(base)
    }
  })

  test('structure is not confused with strings that spell it', () => {
    expect(fp('{"a":{"b":1}}')).not.toBe(fp('{"a":"{\\"b\\":1}"}'))
    expect(fp('["a,b"]')).not.toBe(fp('["a","b"]'))
    expect(fp('{"a":"b","c":"d"}')).not.toBe(fp('{"a":"b\\",\\"c\\":\\"d"}'))
  })

  test('absent arguments read as an empty object; other scalars and empty containers are values of their own', () => {
    expect(callFingerprint('search', Buffer.from('{}'), -1, -1)).toBe(fp('{}'))
    expect(new Set([fp('{}'), fp('[]'), fp('null'), fp('""'), fp('0'), fp('false')]).size).toBe(6)
  })

  test('only the given byte range is read, wherever it lies in the body', () => {
    const body = '{"params":{"name":"echo","arguments":{"b":2,"a":1}},"id":1}'
    const start = body.indexOf('{"b"')
    expect(callFingerprint('search', Buffer.from(body), start, start + '{"b":2,"a":1}'.length)).toBe(fp('{"a":1,"b":2}'))
  })

  test('a member name given twice is read as its last value, as the MCP server reads it', () => {
    expect(fp('{"q":"junk","q":"x"}')).toBe(fp('{"q":"x"}'))
    expect(fp('{"q":"x","q":"junk"}')).not.toBe(fp('{"q":"x"}'))
    expect(fp('{"a":{"k":1,"k":2}}')).toBe(fp('{"a":{"k":2}}'))
  })

  test('the tool is part of the call, and the same arguments to another tool are another call', () => {
    expect(fp('{}', 'search')).not.toBe(fp('{}', 'fetch'))
    // self-delimiting: a tool name cannot run into the arguments
    expect(fp('"b"}', 'a')).not.toBe(fp('}', 'a"b'))
  })

  test('a fixed-size key whatever the tool name and arguments hold', () => {
    expect(fp(`{"blob":"${'x'.repeat(100_000)}"}`, 't'.repeat(1_000_000))).toHaveLength(43)
  })
})

describe('numbers are compared by value where every decoder reads the same value (issue 24, item 11)', () => {
  const same = (...spellings: string[]): void => {
    const prints = spellings.map((n) => fp(`{"n":${n},"list":[${n}]}`))
    expect(new Set(prints).size).toBe(1)
  }
  const different = (...numbers: string[]): void => {
    expect(new Set(numbers.map((n) => fp(`{"n":${n}}`))).size).toBe(numbers.length)
  }

  test('each spelling of one counts as the same call', () => {
    same('1', '1.0', '1e0', '10e-1', '1E0', '1e+0', '1.000', '0.1e1', '100e-2', '0.0001e4', '1e0000000000000000000')
  })

  test('each spelling of other values, and every zero, count as one call each', () => {
    same('0.1', '1e-1', '0.10', '10e-2', '0.01E1')
    same('-2.5', '-25e-1', '-0.25e1', '-2.50')
    same('1e20', '100000000000000000000', '1E+20', '0.1e21')
    same('0', '-0', '0.0', '-0.0e5', '0e-7', '0E400')
    same('123456789012345', '1.23456789012345e14') // 15 digits: always exact
    same('0.30000000000000004', '3.0000000000000004e-1', '30000000000000004e-17') // 17 digits that round-trip
    same('9007199254740992', '9.007199254740992e15')
    same('5e-324', '5.0e-324', '0.5e-323') // the smallest double
    same('1.7976931348623157e308', '17976931348623157e292') // the largest
  })

  test('numbers a double cannot hold exactly keep their text: distinct big integers stay distinct calls', () => {
    different('12345678901234567890', '12345678901234567891', '12345678901234567890.0')
    different('9007199254740993', '9007199254740992') // 2^53 + 1 is not a double; 2^53 is
    different('1.00000000000000001', '1')
    different('1e400', '1e401', '10e399') // past the largest double
    different('1e-400', '0') // below the smallest
    different('0.3', '0.30000000000000004', '0.1')
  })

  test('a number is never confused with a string or another type', () => {
    expect(new Set([fp('1'), fp('"1"'), fp('true'), fp('[1]'), fp('1e1'), fp('10')]).size).toBe(5) // 1e1 and 10 are one
  })
})

describe('arguments of any size are canonicalized whole (issue 24, item 11)', () => {
  const blob = 'x'.repeat(200 * 1024)

  test('whitespace padding past 64 KiB, anywhere, makes no difference', () => {
    const plain = fp(`{"q":"${blob}","n":1}`)
    const pad = ' \n\t\r'.repeat(32 * 1024) // 128 KiB
    expect(fp(`${pad}{${pad}"q"${pad}:${pad}"${blob}"${pad},${pad}"n"${pad}:${pad}1${pad}}${pad}`)).toBe(plain)
    expect(fp(`{"n":1.0,${' '.repeat(1024 * 1024)}"q":"${blob}"}`)).toBe(plain)
  })

  test('large arguments in another key order, number spelling or string escapes are the same call', () => {
    const plain = fp(`{"a":{"b":[1,2,{"c":"${blob}","d":0.5}],"e":"é"},"f":${JSON.stringify(blob)}}`)
    expect(fp(`{"f":"${blob}","a":{"e":"\u00e9","b":[1e0,20e-1,{"d":5e-1,"c":"${blob}"}]}}`)).toBe(plain)
    expect(fp(`{"a":{"b":[1,2,{"c":"${blob}","d":0.5}],"e":"é"},"f":"${blob}y"}`)).not.toBe(plain)
  })

  test('a large argument with a key given twice reads as its last value', () => {
    expect(fp(`{"q":"${blob}","q":"x"}`)).toBe(fp('{"q":"x"}'))
    expect(fp(`{"q":"x","q":"${blob}"}`)).toBe(fp(`{"q":"${blob}"}`))
  })

  test('deep nesting with members out of order at every level: one value, one fingerprint', () => {
    let a = `"${blob}"`
    let b = `"${blob}"`
    for (let depth = 0; depth < 60; depth++) {
      a = `{"k${depth}":${depth},"v":${a}}`
      b = `{ "v" : ${b} , "k${depth}" : ${depth}.0 }`
    }
    expect(fp(b)).toBe(fp(a))
    expect(fp(b.replace('"k30"', '"k31"'))).not.toBe(fp(a))
  })

  test('many members, sorted or not, with duplicates: the same as the parsed value says', () => {
    const keys = Array.from({ length: 5000 }, (_, i) => `k${(i * 7919) % 5000}`)
    const members = keys.map((k, i) => `"${k}":${i % 3 === 0 ? `"${k}"` : `{"i":${i}}`}`)
    const text = `{${members.join(',')},"k17":"last"}`
    const value = JSON.parse(text) as Record<string, unknown>
    const sortedText = `{${Object.keys(value)
      .sort()
      .reverse()
      .map((k) => `${JSON.stringify(k)}:${JSON.stringify(value[k])}`)
      .join(',')}}`
    expect(fp(text)).toBe(fp(sortedText))
  })
})

describe('against JSON.parse: random values in random spellings', () => {
  /** A small deterministic generator (mulberry32), so a failure replays. */
  function random(seed: number): () => number {
    return () => {
      seed = (seed + 0x6d2b79f5) | 0
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296
    }
  }
  const NUMBERS = [0, 1, -1, 2.5, 0.1, 1e-7, 123456.789, 1e21, -3e-300, 2 ** 53, 0.30000000000000004, 42]
  const STRINGS = ['', 'a', 'é', 'x"y', 'tab\there', '\u2028', '😀', 'k']

  function valueOf(r: () => number, depth: number): unknown {
    const pick = r()
    if (depth > 3 || pick < 0.35) return NUMBERS[Math.floor(r() * NUMBERS.length)]
    if (pick < 0.55) return STRINGS[Math.floor(r() * STRINGS.length)]
    if (pick < 0.6) return [true, false, null][Math.floor(r() * 3)]
    if (pick < 0.8) return Array.from({ length: Math.floor(r() * 4) }, () => valueOf(r, depth + 1))
    const o: Record<string, unknown> = {}
    for (let n = Math.floor(r() * 5); n > 0; n--)
      o[STRINGS[Math.floor(r() * STRINGS.length)] + String(Math.floor(r() * 3))] = valueOf(r, depth + 1)
    return o
  }

  /** Another spelling of the same value: spaces, key order, number and string spellings, duplicate keys. */
  function spell(v: unknown, r: () => number): string {
    const sp = (): string => [' ', '', '\n ', '\t', ''][Math.floor(r() * 5)]
    if (typeof v === 'number') {
      const [m, e] = v.toExponential().split('e')
      const options = [String(v), `${m}e${e}`, `${m}E${Number(e) >= 0 ? '+' : ''}${Number(e)}`, `${m.includes('.') ? m : `${m}.`}0e${e}`]
      if (Number.isInteger(v) && v !== 0 && Math.abs(v) < 1e15) options.push(`${v}.0`, `${v}0e-1`)
      return options[Math.floor(r() * options.length)]
    }
    if (typeof v === 'string') {
      return r() < 0.5
        ? JSON.stringify(v)
        : `"${[...v].map((c) => (c.length === 1 && r() < 0.5 ? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}` : JSON.stringify(c).slice(1, -1))).join('')}"`
    }
    if (Array.isArray(v)) return `[${sp()}${v.map((x) => spell(x, r)).join(`${sp()},${sp()}`)}${sp()}]`
    if (v !== null && typeof v === 'object') {
      const entries = Object.entries(v).sort(() => r() - 0.5)
      const parts = entries.map(([k, x]) => `${JSON.stringify(k)}${sp()}:${sp()}${spell(x, r)}`)
      if (entries.length > 0 && r() < 0.3) parts.unshift(`${JSON.stringify(entries[0][0])}:"overwritten"`) // a duplicate, first
      return `{${sp()}${parts.join(`${sp()},${sp()}`)}${sp()}}`
    }
    return JSON.stringify(v)
  }

  /** What JSON.parse makes of a text, with keys sorted: equal exactly when the values are. */
  function reference(text: string): string {
    const sorted = (v: unknown): unknown =>
      Array.isArray(v)
        ? v.map(sorted)
        : v !== null && typeof v === 'object'
          ? Object.fromEntries(
              Object.keys(v)
                .sort()
                .map((k) => [k, sorted((v as Record<string, unknown>)[k])]),
            )
          : v
    return JSON.stringify(sorted(JSON.parse(text)))
  }

  test('two spellings give one fingerprint exactly when JSON.parse reads one value', () => {
    const r = random(24)
    const seen = new Map<string, string>() // fingerprint → reference
    for (let n = 0; n < 400; n++) {
      const v = valueOf(r, 0)
      for (let k = 0; k < 3; k++) {
        const text = spell(v, r)
        const print = fp(text)
        const ref = reference(text)
        expect(ref).toBe(reference(JSON.stringify(v)))
        const before = seen.get(print)
        if (before !== undefined) expect(before).toBe(ref)
        seen.set(print, ref)
      }
      expect(fp(spell(v, r))).toBe(fp(JSON.stringify(v)))
    }
    expect(new Set(seen.values()).size).toBe(seen.size)
  })
})
