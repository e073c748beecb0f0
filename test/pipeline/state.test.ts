import { setFlagsFromString } from 'node:v8'
import { runInNewContext, runInThisContext } from 'node:vm'
import { Exchange } from '../../src/pipeline/exchange'
import { type StateKey, stateKey } from '../../src/pipeline/state'

const exchange = (): Exchange => new Exchange({ headers: {} } as never, {} as never, 'r', 0, 0)

class Receipt {
  constructor(readonly cost: number) {}
}

const RECEIPT = stateKey<Receipt | null>('test.receipt', null)
const COUNT = stateKey<number>('test.count', 0)
const NAME = stateKey<string | null>('test.name', null)
const FLAG = stateKey<boolean>('test.flag', false)

describe('per-request stage state', () => {
  test('a key reads its initial value until set, then what was set, typed by the key', () => {
    const ex = exchange()
    expect(ex.get(RECEIPT)).toBeNull()
    expect(ex.get(COUNT)).toBe(0)
    expect(ex.get(FLAG)).toBe(false)
    const receipt = new Receipt(3)
    ex.set(RECEIPT, receipt)
    ex.set(COUNT, 2)
    // Typed without a cast: the receipt's own fields are there to read.
    const read: Receipt | null = ex.get(RECEIPT)
    expect(read?.cost).toBe(3)
    expect(ex.get(RECEIPT)).toBe(receipt)
    expect(ex.get(COUNT)).toBe(2)
    expect(ex.get(NAME)).toBeNull() // keys apart: setting two left the others alone
    expect(ex.get(FLAG)).toBe(false)
    ex.set(RECEIPT, null)
    expect(ex.get(RECEIPT)).toBeNull()
    expect(ex.get(COUNT)).toBe(2)
  })

  test('the type system refuses a value of another type, a key of another type, and an initial value that could be shared', () => {
    const ex = exchange()
    // @ts-expect-error a string is no Receipt
    ex.set(RECEIPT, 'receipt')
    // @ts-expect-error a count is a number
    ex.set(COUNT, null)
    // @ts-expect-error a key of strings is not a key of numbers
    const wrong: StateKey<number> = NAME
    // @ts-expect-error an object as the initial value would be one object for every request
    const shared = stateKey<Map<string, number> | null>('test.shared', new Map())
    // @ts-expect-error a number read as a string
    const text: string = ex.get(COUNT)
    expect([wrong, shared, text]).toHaveLength(3)
  })

  test('each request has its own values: setting one leaves every other, and every new one, at the initial value', () => {
    const a = exchange()
    const b = exchange()
    a.set(NAME, 'alpha')
    a.set(FLAG, true)
    b.set(NAME, 'beta')
    expect(a.get(NAME)).toBe('alpha')
    expect(b.get(NAME)).toBe('beta')
    expect(b.get(FLAG)).toBe(false)
    const c = exchange()
    expect(c.get(NAME)).toBeNull()
    expect(c.get(FLAG)).toBe(false)
    c.set(COUNT, 5)
    expect(a.get(COUNT)).toBe(0)
    expect(b.get(COUNT)).toBe(0)
  })

  test('a key declared after a request began still works on it, and keeps what was set before', () => {
    const ex = exchange()
    ex.set(COUNT, 7)
    const LATE = stateKey<string | null>('test.late', null)
    expect(ex.get(LATE)).toBeNull()
    ex.set(LATE, 'late')
    expect(ex.get(LATE)).toBe('late')
    expect(ex.get(COUNT)).toBe(7)
    expect(exchange().get(LATE)).toBeNull()
  })

  test('every Exchange keeps one shape, whatever state its stages kept', () => {
    setFlagsFromString('--allow-natives-syntax')
    const sameMap = runInThisContext('(a, b) => %HaveSameMap(a, b)') as (a: object, b: object) => boolean
    const plain = exchange()
    const withState = exchange()
    withState.set(RECEIPT, new Receipt(1))
    withState.set(NAME, 'x')
    const otherState = exchange()
    otherState.set(FLAG, true)
    expect(sameMap(plain, withState)).toBe(true)
    expect(sameMap(plain, otherState)).toBe(true)
  })

  test('a value lives as long as its request and no longer: nothing keeps it once the Exchange is gone', async () => {
    setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const [exchangeGone, valueGone] = ((): [WeakRef<Exchange>, WeakRef<Receipt>] => {
      const ex = exchange()
      const receipt = new Receipt(1)
      ex.set(RECEIPT, receipt)
      return [new WeakRef(ex), new WeakRef(receipt)]
    })()
    // A WeakRef's target is kept until the current job ends.
    await new Promise((resolve) => setImmediate(resolve))
    gc()
    expect(exchangeGone.deref()).toBeUndefined()
    expect(valueGone.deref()).toBeUndefined()
  })
})
