import { FailOpenWindow } from '../../src/budget/fail-open-window'

test('fail-opens are counted over the last 60 seconds and age out second by second', () => {
  let ms = 5_000_000
  const window = new FailOpenWindow(() => ms)
  window.add()
  window.add()
  ms += 30_000
  window.add()
  expect(window.count()).toBe(3)
  ms += 29_999 // 59.999 s after the first two
  expect(window.count()).toBe(3)
  ms += 1_000
  expect(window.count()).toBe(1)
  ms += 60_000
  expect(window.count()).toBe(0)
  window.add() // reuses a slot last written a minute ago
  expect(window.count()).toBe(1)
})
