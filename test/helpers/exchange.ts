import { IncomingMessage, ServerResponse } from 'node:http'
import { Socket } from 'node:net'
import { Exchange } from '../../src/pipeline/exchange'

/**
 * An Exchange over a real Node request object for POST/GET… /mcp with `headers` (name, value) in order,
 * read as Node reads them: raw headers as sent, and in `req.headers` lower-case names with repeats
 * joined by ", ", except Host, of which Node keeps the first.
 */
export function exchangeWithHeaders(method: string, headers: Array<[string, string]>): Exchange {
  const req = new IncomingMessage(new Socket())
  req.method = method
  req.url = '/mcp'
  req.rawHeaders = headers.flat()
  for (const [name, value] of headers) {
    const key = name.toLowerCase()
    if (!(key in req.headers)) req.headers[key] = value
    else if (key !== 'host') req.headers[key] = `${req.headers[key] as string}, ${value}`
  }
  return new Exchange(req, new ServerResponse(req), 'id', 0, 0)
}
