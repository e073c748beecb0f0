import type { Exchange } from './exchange'
import type { Outcome, Stage } from './stage'

/**
 * The answer phase's plan for one stage chain, made when the chain is built: which stages read
 * answers, and for which methods. A chain where no stage declares `answers` (budgets off) costs a
 * forwarded request one length check.
 */
export class AnswerPlan {
  private readonly readers: ReadonlyArray<{ stage: Stage; methods: ReadonlySet<string>; messages: boolean; also: boolean }>
  /** The stages that read the messages of GET streams (AnswerInterest.streams), or null when none does. */
  private readonly streamReaders: Stage[] | null

  constructor(stages: readonly Stage[]) {
    this.readers = stages
      .filter((s) => s.answers !== undefined && s.answers.methods.length > 0)
      .map((stage) => ({
        stage,
        methods: new Set(stage.answers!.methods),
        messages: stage.answers!.reads === 'messages',
        also: stage.answers!.alsoReads !== undefined,
      }))
    const streams = stages.filter((s) => s.answers?.streams === true && s.answers.reads === 'messages')
    this.streamReaders = streams.length === 0 ? null : streams
  }

  /**
   * Called once a request is admitted, before it is forwarded: notes on the exchange the stages that
   * read its answer (in chain order) and whether any reads its messages.
   */
  attach(ex: Exchange): void {
    if (this.streamReaders !== null && ex.req.method === 'GET') {
      ex.answerReaders = this.streamReaders
      ex.readsMessages = true
      return
    }
    const readers = this.readers
    if (readers.length === 0) return
    const calls = ex.calls
    for (let r = 0; r < readers.length; r++) {
      const reader = readers[r]
      let reads = false
      for (let i = 0; i < calls.length && !reads; i++) reads = reader.methods.has(calls[i].method)
      if (!reads && reader.also) reads = reader.stage.answers!.alsoReads!(ex)
      if (!reads) continue
      ;(ex.answerReaders ??= []).push(reader.stage)
      if (reader.messages) ex.readsMessages = true
    }
  }
}

/**
 * Tells every reader of this request's answer what became of it; once per request (later calls do
 * nothing). Never throws: it runs in the relay's callbacks, its deadline timer and the response's
 * 'close' event, where a throw would reach the process. A reader that throws (it must not) is noted on
 * the exchange for the gateway, which answers and audits the request as `internal`, and the readers
 * after it still hear the outcome, so a refund is not skipped.
 */
export function reportOutcome(ex: Exchange, outcome: Outcome): void {
  const readers = ex.answerReaders
  if (readers === null || ex.outcomeReported) return
  ex.outcomeReported = true
  for (let i = 0; i < readers.length; i++) {
    try {
      readers[i].onOutcome?.(ex, outcome)
    } catch (err) {
      noteAnswerFailure(ex, err)
    }
  }
}

/**
 * What a reader throws when the upstream's answer itself must not reach the client (a legacy stream's
 * endpoint the gateway cannot route): the upstream's failure, not the stage's. The relay ends the answer
 * as WL_UPSTREAM_FAILED (502 while nothing was sent, else the stream is cut; audited `upstream.failed`
 * with this message) and counts it as the upstream's bad answer.
 */
export class AnswerRefused extends Error {
  override readonly name = 'AnswerRefused'
}

/**
 * Passes one message of the answer through every reader that reads messages, in chain order. A reader
 * that throws is noted on the exchange (`answerFailure`) and the throw goes on to the relay: the
 * message it could not read is never passed on unread (a list the filter could not judge stays hidden).
 * An AnswerRefused goes on to the relay without being noted: it is the upstream's failure.
 */
export function rewriteMessage(ex: Exchange, message: string): string {
  const readers = ex.answerReaders
  if (readers === null) return message
  let text = message
  for (let i = 0; i < readers.length; i++) {
    const reader = readers[i]
    if (reader.onMessage === undefined || reader.answers?.reads !== 'messages') continue
    try {
      text = reader.onMessage(ex, text)
    } catch (err) {
      if (!(err instanceof AnswerRefused)) noteAnswerFailure(ex, err)
      throw err
    }
  }
  return text
}

/**
 * Keeps the first throw of the answer phase (a reader's, or a metric's in the relay) for the gateway,
 * which answers and audits the request as `internal`; a thrown non-Error becomes one.
 */
export function noteAnswerFailure(ex: Exchange, err: unknown): void {
  if (ex.answerFailure === null)
    ex.answerFailure = err instanceof Error ? err : new Error(`a stage threw ${String(err)} in the answer phase`)
}
