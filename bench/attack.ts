/**
 * One caller must not stall the others: a victim's tools/call latency while an
 * attacker of another tenant sends bodies of the maximum size in a loop, flat (a valid call whose
 * arguments are two million numbers, the costliest shape to scan) and nested (brackets four million
 * deep) and a params object of 400,000 keys, against the same victim with no attacker, all in one run. A last scenario runs the flat
 * attack at the old 1 MiB max_body_bytes, to compare what raising the default to 4 MiB cost.
 */
import { benchHeaders, startBenchGateway, startRawUpstream } from './fixtures'
import { type BenchSection, type LoadResult, interleave, runLoad, runLoadInWorker, summarize } from './load'

const MIB = 1024 * 1024

/** A valid tools/call of exactly `bytes` bytes: `{"data":[0,0,…]}` as its arguments. */
export function flatBody(bytes: number): Buffer {
  const head = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"data":[0'
  const tail = ']}}}'
  const pairs = Math.floor((bytes - head.length - tail.length) / 2)
  return Buffer.from(head + ',0'.repeat(pairs) + tail)
}

/** A tools/call whose params hold as many keys as `bytes` allows (refused past 64 members, after the scan). */
export function manyKeysBody(bytes: number): Buffer {
  const head = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"'
  const parts: string[] = [head]
  let size = head.length + 2
  for (let i = 0; size < bytes - 16; i++) {
    const part = `,"k${i}":0`
    parts.push(part)
    size += part.length
  }
  parts.push('}}')
  return Buffer.from(parts.join(''))
}

/** Brackets nested as deep as `bytes` allows. */
export function nestedBody(bytes: number): Buffer {
  const depth = Math.floor(bytes / 2)
  return Buffer.from('['.repeat(depth) + ']'.repeat(depth))
}

const VICTIM_CONCURRENCY = 4
const ATTACKER_CONCURRENCY = 2

const attack: BenchSection = {
  name: 'attack',
  budgetSeconds: 26,
  async run(ctx) {
    const upstream = await startRawUpstream()
    const gateway = await startBenchGateway(upstream.url, { max_body_bytes: 4 * MIB })
    const oldLimit = await startBenchGateway(upstream.url, { max_body_bytes: MIB })
    const rounds = Math.min(ctx.rounds, 3)
    const victim = (base: string) => (): Promise<LoadResult> =>
      runLoad({
        url: `${base}/mcp`,
        method: 'POST',
        headers: benchHeaders('victim', 'acme'),
        body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}',
        concurrency: VICTIM_CONCURRENCY,
        durationMs: ctx.roundMs,
        warmupMs: 200,
      })
    /** The victim's round, with the attacker sending `body` in a loop for the same time. */
    const underAttack = (base: string, body: Buffer) => async (): Promise<LoadResult> => {
      // On its own thread: sending megabytes must not slow the generator timing the victim.
      const attacker = runLoadInWorker({
        url: `${base}/mcp`,
        method: 'POST',
        headers: benchHeaders('attacker', 'guest'),
        body,
        concurrency: ATTACKER_CONCURRENCY,
        durationMs: ctx.roundMs + 200,
        requestTimeoutMs: 30_000,
      })
      const result = await victim(base)()
      attackerRounds.push(await attacker)
      return result
    }
    const attackerRounds: LoadResult[] = []
    try {
      ctx.progress(
        `attack: ${rounds} rounds of ${ctx.roundMs} ms: victim alone, under flat, nested and many-keys 4 MiB attacks, under a flat 1 MiB attack (max_body_bytes 1 MiB)`,
      )
      const results = await interleave(rounds, {
        alone: victim(gateway.url),
        flat: underAttack(gateway.url, flatBody(4 * MIB)),
        nested: underAttack(gateway.url, nestedBody(4 * MIB)),
        keys: underAttack(gateway.url, manyKeysBody(4 * MIB)),
        flatOld: underAttack(oldLimit.url, flatBody(MIB)),
      })
      const alone = summarize(results.alone)
      const row = (label: string, runs: LoadResult[]) => {
        const r = summarize(runs)
        return {
          label,
          result: r,
          note: `p99 ×${(r.p99Ms / alone.p99Ms).toFixed(2)} of alone, p50 +${(r.p50Ms - alone.p50Ms).toFixed(2)} ms`,
        }
      }
      const attackerRate = (i: number) => summarize(attackerRounds.filter((_, k) => k % 4 === i)).reqPerSec.toFixed(1)
      return [
        { label: `victim alone (${VICTIM_CONCURRENCY} in flight)`, result: alone },
        row('victim, attacker flat 4 MiB', results.flat),
        row('victim, attacker nested 4 MiB', results.nested),
        row('victim, attacker 4 MiB of params keys', results.keys),
        row('victim, attacker flat 1 MiB (old limit)', results.flatOld),
        {
          label: 'attacker bodies per second',
          note: `flat 4 MiB ${attackerRate(0)}, nested 4 MiB ${attackerRate(1)}, keys 4 MiB ${attackerRate(2)}, flat 1 MiB ${attackerRate(3)} (${ATTACKER_CONCURRENCY} connections)`,
        },
      ]
    } finally {
      await gateway.close()
      await oldLimit.close()
      await upstream.close()
    }
  },
}

export const sections: BenchSection[] = [attack]
