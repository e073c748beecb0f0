/**
 * Plain node:http and raw-socket clients for end-to-end tests that need what fetch() forbids or
 * normalises: chosen Host, Origin and hop-by-hop headers, repeated headers, odd request targets.
 */
import { type IncomingHttpHeaders, type IncomingMessage, request } from 'node:http'
import { connect } from 'node:net'

export interface Reply {
  status: number
  headers: IncomingHttpHeaders
  body: string
}

/**
 * One request with every header as given; resolves with the whole answer. `path`: the request target
 * exactly as given (a URL string would have its dot segments and percent-encodings normalised).
 */
export function send(
  url: string,
  method: string,
  headers: Record<string, string | string[]>,
  body?: string,
  path?: string,
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers, ...(path === undefined ? {} : { path }) }, (res) => {
      readAll(res).then((text) => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }), reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

/** One request; resolves on the response headers, leaving the body (a stream, say) to the caller. */
export function open(
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string; signal?: AbortSignal },
): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: options.method ?? 'GET', headers: options.headers, signal: options.signal }, resolve)
    req.on('error', reject)
    req.end(options.body)
  })
}

export function readAll(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = ''
    res.on('data', (c: Buffer) => (text += c.toString('utf8')))
    res.on('end', () => resolve(text))
    res.on('error', reject)
  })
}

/** Sends raw bytes (latin1) to 127.0.0.1:`port` and returns the status line's code. */
export function rawStatus(port: number, text: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(Buffer.from(text, 'latin1')))
    let data = ''
    socket.on('data', (c: Buffer) => {
      data += c.toString('latin1')
      const m = /^HTTP\/1\.1 (\d{3})/.exec(data)
      if (m) {
        resolve(Number(m[1]))
        socket.destroy()
      }
    })
    socket.on('error', reject)
  })
}
