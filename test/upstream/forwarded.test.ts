/**
 * X-Forwarded-* towards the upstream: replaced for anyone, extended only for a trusted proxy.
 * test/e2e/origin.test.ts checks what a real upstream receives through the gateway.
 */
import { IncomingMessage } from 'node:http'
import { Socket } from 'node:net'
import { ForwardedHeaders } from '../../src/upstream/forwarded'

function request(remoteAddress: string | undefined, headers: Record<string, string>): IncomingMessage {
  const socket = new Socket()
  Object.defineProperty(socket, 'remoteAddress', { value: remoteAddress })
  const req = new IncomingMessage(socket)
  req.headers = headers
  return req
}

function sent(chain: ForwardedHeaders, req: IncomingMessage): Record<string, string> {
  const out: string[] = []
  chain.push(req, out)
  const names = out.filter((_, i) => i % 2 === 0)
  expect(new Set(names).size).toBe(names.length) // each header once
  return Object.fromEntries(names.map((name, i) => [name, out[2 * i + 1]]))
}

const CLIENT_COPIES = {
  host: 'gw.example:8080',
  'x-forwarded-for': '203.0.113.9',
  'x-forwarded-host': 'forged.example',
  'x-forwarded-proto': 'https',
  forwarded: 'for=203.0.113.9;proto=https',
}

test("from an untrusted peer the client's copies are replaced: its own address, the Host it sent, http", () => {
  const chain = new ForwardedHeaders(['10.0.0.0/8'])
  expect(sent(chain, request('192.0.2.7', CLIENT_COPIES))).toEqual({
    'x-forwarded-for': '192.0.2.7',
    'x-forwarded-host': 'gw.example:8080',
    'x-forwarded-proto': 'http',
  })
  expect(sent(new ForwardedHeaders([]), request('10.1.2.3', CLIENT_COPIES))).toEqual({
    'x-forwarded-for': '10.1.2.3',
    'x-forwarded-host': 'gw.example:8080',
    'x-forwarded-proto': 'http',
  })
})

test('from a trusted proxy the chain is kept and extended, Forwarded included', () => {
  const chain = new ForwardedHeaders(['10.0.0.0/8', '2001:db8::/32', '192.0.2.1'])
  const expected = {
    'x-forwarded-for': '203.0.113.9, 10.1.2.3',
    'x-forwarded-host': 'forged.example',
    'x-forwarded-proto': 'https',
    forwarded: 'for=203.0.113.9;proto=https',
  }
  expect(sent(chain, request('10.1.2.3', CLIENT_COPIES))).toEqual(expected)
  // An IPv4 client of a dual-stack listener matches IPv4 entries and is named without the ::ffff: prefix.
  expect(sent(chain, request('::ffff:10.1.2.3', CLIENT_COPIES))).toEqual(expected)
  expect(sent(chain, request('2001:db8::5', CLIENT_COPIES))['x-forwarded-for']).toBe('203.0.113.9, 2001:db8::5')
  expect(sent(chain, request('192.0.2.1', { host: 'gw.example' }))).toEqual({
    'x-forwarded-for': '192.0.2.1',
    'x-forwarded-host': 'gw.example',
    'x-forwarded-proto': 'http',
  })
  expect(sent(chain, request('192.0.2.2', CLIENT_COPIES))['x-forwarded-for']).toBe('192.0.2.2')
})

test('an untrusted IPv4-mapped peer is named as plain IPv4; a socket already gone sends no For', () => {
  const chain = new ForwardedHeaders([])
  expect(sent(chain, request('::ffff:192.0.2.7', {}))).toEqual({ 'x-forwarded-for': '192.0.2.7', 'x-forwarded-proto': 'http' })
  expect(sent(chain, request(undefined, { host: 'h' }))).toEqual({ 'x-forwarded-host': 'h', 'x-forwarded-proto': 'http' })
})
