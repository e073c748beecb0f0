import { sseMessageEvent } from '../pipeline/reply'
import { endpointParameters } from '../mcp/legacy-endpoint'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, type Stage } from '../pipeline/stage'
import { stateKey } from '../pipeline/state'

/** The legacy session a GET stream's endpoint event named; null until then, and for every other request. */
const SESSION = stateKey<string | null>('legacy-streams.session', null)

/**
 * The legacy HTTP+SSE transport (MCP 2024-11-05) answers a POST /messages?sessionId=… with 202 and
 * sends the JSON-RPC response on the client's GET /sse stream. A refusal the gateway answers as a
 * tool result (`tool_refusals: result`) must arrive there too, or the client never hears of it. This
 * registry learns which open stream belongs to which session from the stream's first event (`event:
 * endpoint`, data `/messages?sessionId=…`) and lets the gateway write one message into it.
 */
export class LegacyStreams {
  private readonly bySession = new Map<string, Exchange>()

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
        if (ex.get(SESSION) !== null) return data
        const sessionId = endpointParameters(data)?.get('sessionId')
        if (sessionId) {
          this.bySession.set(sessionId, ex)
          ex.set(SESSION, sessionId)
        }
        return data
      },
      finish: (ex) => {
        const sessionId = ex.get(SESSION)
        if (sessionId !== null && this.bySession.get(sessionId) === ex) this.bySession.delete(sessionId)
      },
    }
  }
}
