import type { IncomingMessage } from 'node:http'

export type BodyResult = { ok: true; body: Buffer } | { ok: false; tooLarge: true } | { ok: false; tooLarge: false; error: Error }

/** Why a body stopped arriving when Node saw the connection end rather than the body. */
export const BODY_CUT_OFF = 'client closed the connection before the body ended'

/**
 * Reads a request body, giving up as soon as it passes `maxBytes` (a declared Content-Length over the
 * cap is refused before a byte is read). The caller answers 413; what is left of the body is then
 * read and discarded within bounds (server/linger.ts).
 *
 * Always settles, whenever the connection ends: the stages before this one (a token verified for the
 * first time, waiting on the JWKS) can outlast the client, and a request whose connection already
 * closed, or that Node already failed (a malformed chunk size), emits no further event a listener
 * added now could hear. Such a request resolves at once; a request that ends while being read
 * resolves on its 'close', which Node emits for every request whose connection goes.
 */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<BodyResult> {
  const declared = req.headers['content-length']
  if (declared !== undefined && Number(declared) > maxBytes) return Promise.resolve({ ok: false, tooLarge: true })
  // Destroyed before a listener was here: 'aborted', 'error' and 'close' have all been emitted, and the
  // bytes Node had buffered are gone (a body received whole, then the connection closed, included).
  if (req.destroyed) return Promise.resolve({ ok: false, tooLarge: false, error: req.errored ?? new Error(BODY_CUT_OFF) })
  return new Promise((resolve) => {
    // Nearly every body arrives in one chunk: a list is made only for a second one.
    let first: Buffer | null = null
    let chunks: Buffer[] | null = null
    let size = 0
    const onData = (chunk: Buffer): void => {
      size += chunk.length
      if (size > maxBytes) {
        cleanup()
        resolve({ ok: false, tooLarge: true })
        return
      }
      if (first === null) first = chunk
      else (chunks ??= [first]).push(chunk)
    }
    const onEnd = (): void => {
      cleanup()
      resolve({ ok: true, body: chunks !== null ? Buffer.concat(chunks, size) : (first ?? Buffer.alloc(0)) })
    }
    const onError = (error: Error): void => {
      cleanup()
      resolve({ ok: false, tooLarge: false, error })
    }
    // 'close' before 'end' (cleanup removes this listener at 'end'): the connection went, whether the
    // whole body had arrived (req.complete) or not, since what was not read yet was dropped with it.
    const onClose = (): void => onError(req.errored ?? new Error(BODY_CUT_OFF))
    const cleanup = (): void => {
      req.off('data', onData)
      req.off('end', onEnd)
      req.off('error', onError)
      req.off('close', onClose)
    }
    req.on('data', onData)
    req.on('end', onEnd)
    req.on('error', onError)
    req.on('close', onClose)
  })
}
