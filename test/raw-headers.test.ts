import { rawHeaderCount } from '../src/raw-headers'

describe('rawHeaderCount (a header name among Node raw headers, ASCII case-insensitively)', () => {
  const raw = ['Host', 'a', 'authorization', 'b', 'AUTHORIZATION', 'c', 'Mcp-Method', 'd', 'mcp-name', 'e', 'x-authorization', 'f']

  it('counts every spelling of the name and nothing else', () => {
    expect(rawHeaderCount(raw, 'authorization')).toBe(2)
    expect(rawHeaderCount(raw, 'host')).toBe(1)
    expect(rawHeaderCount(raw, 'mcp-method')).toBe(1)
    expect(rawHeaderCount(raw, 'mcp-name')).toBe(1)
    expect(rawHeaderCount(raw, 'mcp-session-id')).toBe(0)
    expect(rawHeaderCount([], 'host')).toBe(0)
  })

  it('folds letters only: a character that differs from a hyphen by 0x20 is not a hyphen', () => {
    expect(rawHeaderCount(['mcp\rmethod', 'x', 'MCP-METHOD', 'y'], 'mcp-method')).toBe(1)
    // Nor is a non-ASCII character that lower-cases to an ASCII letter (U+212A KELVIN SIGN is `k`).
    expect(rawHeaderCount(['\u212Aey', 'x'], 'key')).toBe(0)
  })
})
