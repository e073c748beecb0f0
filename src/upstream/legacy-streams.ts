import { sseMessageEvent } from '../pipeline/reply'
import { endpointParameters } from '../mcp/legacy-endpoint'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, type Stage } from '../pipeline/stage'

/**
 * The legacy HTTP+SSE transport (MCP 2024-11-05) answers a POST /messages?sessionId=… with 202 and
 * sends the JSON-RPC response on the client's GET /sse stream. A refusal the gateway answers as a
 * tool result (`tool_refusals: result`) must arrive there too, or the client never hears of it. This
 * registry learns which open stream belongs to which session from the stream's first event (`event:
 * endpoint`, data `/messages?sessionId=…`) and lets the gateway write one message into it.
 */
export class LegacyStreams {
  private readonly bySession = new Map<string, Exchange>()
  private readonly sessionOf = new WeakMap<Exchange, string>()

  /**
   * Writes one JSON-RPC message as an SSE `message` event into the open stream of `sessionId`, when
   * that stream runs through this process for the same caller. False when it does not (the stream is
   * on another replica, closed, or another caller's): the refusal is then answered over HTTP.
   */
  deliver(sessionId: string, ex: Exchange, message: string): boolean {
    const stream = this.bySession.get(sessionId)
    if (stream === undefined || stream.res.destroyed || !stream.res.headersSent) return false
    const a = stream.principal
    const b = ex.principal
    if (a?.identity !== b?.identity || a?.tenant !== b?.tenant) return false
    // The relay writes only whole events (upstream/sse-messages.ts), so between two of its writes the
    // stream is always at an event boundary, where this event fits.
    stream.res.write(sseMessageEvent(message))
    return true
  }

  /** The answer-phase reader of every GET stream: notes the session an endpoint event names. */
  stage(): Stage {
    return {
      name: 'legacy-streams',
      answers: { methods: [], reads: 'messages', streams: true },
      run: () => CONTINUE,
      onMessage: (ex, data) => {
        if (this.sessionOf.has(ex)) return data
        const sessionId = endpointParameters(data)?.get('sessionId')
        if (sessionId) {
          this.bySession.set(sessionId, ex)
          this.sessionOf.set(ex, sessionId)
        }
        return data
      },
      finish: (ex) => {
        const sessionId = this.sessionOf.get(ex)
        if (sessionId !== undefined && this.bySession.get(sessionId) === ex) this.bySession.delete(sessionId)
      },
    }
  }
}
