import { idKey } from '../../src/pipeline/id-key'

describe('idKey: one key for every spelling some MCP server reads as the same id', () => {
  test.each<[string, unknown[]]>([
    ['1', [1, '1', '01', '1.0', '1e0', '10e-1', ' 1 ', '+1', '0x1', '0b1', '1.']],
    ['0', [0, '0', '-0', '0.0', '-0e5', '00']],
    ['-5', [-5, '-5', '-05', '-5.0']],
    ['1000', [1000, '1_000', '1e3']],
    // Past 2^53 a double reader confuses neighbours, and Python's str(int) spells them out.
    ['12345678901234567000', ['12345678901234567890', '12345678901234567891', '12345678901234567000']],
    ['1e+21', ['1e21', '1000000000000000000000']],
    ['null', [null, 'null']],
  ])('%s', (key, ids) => {
    for (const id of ids) expect([id, idKey(id as string | number | null)]).toEqual([id, key])
  })

  test('other strings are their own key, whitespace and case included', () => {
    for (const id of ['abc', 'ABC', '1a', 'Infinity', 'NaN', '', ' ', '_1', '1__0', 'x1', '-', '.']) expect(idKey(id)).toBe(id)
  })
})
