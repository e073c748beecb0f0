/**
 * ns per call of the loop breaker's fingerprint (budget/call-fingerprint.ts), which runs on every
 * tools/call when budget.repeat_limit is set: a small argument object as agents send them, and two
 * of 1 MiB: 1,000 members holding long strings, numbers and nested objects whose members are not in
 * key order, and the worst shape for a walker, ~45,000 small objects of short keys and numbers.
 * Run after `npm run build`: node dist/bench/fingerprint.js [path to a built call-fingerprint.js, to
 * compare with another version]
 */
import { callFingerprint } from '../src/budget/call-fingerprint'

type Fingerprint = typeof callFingerprint

const SMALL = Buffer.from('{"query":"weather in Paris tomorrow","limit":10,"units":"metric","include":["wind","rain"]}')

function large(): Buffer {
  const members: string[] = []
  for (let i = 0, bytes = 0; bytes < 1024 * 1024 - 2048; i++) {
    const n = String(i).padStart(4, '0')
    members.push(`"z${n}":{"id":${i},"score":${i / 8},"label":"item ${'x'.repeat(900)}","tags":["a","b",${i % 7}]}`)
    bytes += members[i].length + 1
  }
  return Buffer.from(`{${members.join(',')}}`)
}

function dense(): Buffer {
  const items: string[] = []
  for (let i = 0, bytes = 0; bytes < 1024 * 1024 - 64; i++) {
    items.push(`{"v":${i % 100}.5,"id":${i},"k":"t${i % 10}"}`)
    bytes += items[i].length + 1
  }
  return Buffer.from(`{"items":[${items.join(',')}]}`)
}

function nsPerOp(fp: Fingerprint, body: Buffer, iterations: number): number {
  for (let i = 0; i < Math.max(10, iterations / 10); i++) fp('search', body, 0, body.length)
  const rounds: number[] = []
  for (let r = 0; r < 5; r++) {
    const t0 = process.hrtime.bigint()
    for (let i = 0; i < iterations; i++) fp('search', body, 0, body.length)
    rounds.push(Number(process.hrtime.bigint() - t0) / iterations)
  }
  rounds.sort((a, b) => a - b)
  return rounds[2] // the median round
}

function main(): void {
  const path = process.argv[2]
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const fp = path === undefined ? callFingerprint : (require(path) as { callFingerprint: Fingerprint }).callFingerprint
  process.stdout.write(`small (${SMALL.length} B): ${Math.round(nsPerOp(fp, SMALL, 200_000))} ns/op\n`)
  for (const [name, body] of [
    ['large, long strings', large()],
    ['large, small tokens', dense()],
  ] as const) {
    const ns = nsPerOp(fp, body, 30)
    process.stdout.write(`${name} (${body.length} B): ${(ns / 1e6).toFixed(2)} ms/op (${(ns / body.length).toFixed(2)} ns/byte)\n`)
  }
}

main()
