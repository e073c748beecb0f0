import { runInNewContext } from 'node:vm'
import { WardlineError, describeError } from '../src/errors'

describe('describeError', () => {
  test('follows the cause chain and names error codes once', () => {
    const root = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' })
    const err = new WardlineError('WL_UPSTREAM_UNREACHABLE', 'upstream unreachable', { cause: new Error('fetch failed', { cause: root }) })
    expect(describeError(err)).toBe('upstream unreachable (WL_UPSTREAM_UNREACHABLE): fetch failed: connect ECONNREFUSED 127.0.0.1:9')
  })

  test('keeps the message and cause of an error made in another realm', () => {
    const foreign = runInNewContext("new Error('outer', { cause: Object.assign(new Error('inner'), { code: 'E_INNER' }) })") as unknown
    expect(foreign instanceof Error).toBe(false)
    expect(describeError(foreign)).toBe('outer: inner (E_INNER)')
  })

  test('describes thrown non-errors and folds whitespace onto one line', () => {
    expect(describeError('plain\nstring')).toBe('plain string')
    expect(describeError(42)).toBe('42')
  })
})
