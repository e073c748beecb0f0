import { CANONICAL_MAX_BYTES, callFingerprint } from '../../src/budget/call-fingerprint'

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

  test('any different value, array order or number spelling is a different call', () => {
    const base = fp('{"a":[1,2],"b":"x"}')
    for (const other of [
      '{"a":[2,1],"b":"x"}',
      '{"a":[1,2],"b":"X"}',
      '{"a":[1,2]}',
      '{"a":[1.0,2],"b":"x"}',
      '{"a":[1,2],"b":"x","c":null}',
    ]) {
      expect(fp(other)).not.toBe(base)
    }
    // two integers one double cannot tell apart stay two calls
    expect(fp('{"n":12345678901234567890}')).not.toBe(fp('{"n":12345678901234567891}'))
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

  test('arguments past the canonical bound are hashed byte for byte, not walked', () => {
    const big = (order: 'ab' | 'ba'): string => {
      const blob = 'x'.repeat(CANONICAL_MAX_BYTES)
      return order === 'ab' ? `{"a":1,"b":"${blob}"}` : `{"b":"${blob}","a":1}`
    }
    expect(fp(big('ab'))).toBe(fp(big('ab')))
    expect(fp(big('ab'))).not.toBe(fp(big('ba'))) // no longer canonicalized: documented
  })
})
