import { quotedName } from '../escape'
import type { Exchange } from '../pipeline/exchange'
import { setCause } from '../pipeline/reason'
import { CONTINUE, type Refusal, type Stage } from '../pipeline/stage'
import type { CompiledPolicy } from './compile'

/** Generic on purpose: which rule fired is for operators (the audit reason), never for the caller. */
const MESSAGE = 'Forbidden by policy'

function forbidden(reason: string): Refusal {
  return { status: 403, decision: 'deny', code: 'policy.denied', reason, message: MESSAGE }
}

/**
 * Judges every gated call (tools/call, resources/*, prompts/*, completion/complete) by identity,
 * tenant, method and target; anything else passes untouched. It runs before the budget stage and only
 * records its verdict (`ex.denial`): the budget stage needs it to charge a denied call to the caller's
 * own identity bucket and no shared one, and a call over budget must still get 429 rather than 403
 * (docs/principles.md, "What a call costs"). policyVerdictStage, after the budget stage, answers the denial.
 *
 * A denied call gets 403 with JSON-RPC code 403 and never reaches the upstream. A batch with any
 * denied element is refused whole: forwarding part of a batch would answer some ids and not others.
 * Each denied element's `reason` names its rule (`rule 3`) or `default`, so its audit entry says which
 * rule fired; the other elements of a refused batch carry the batch's reason.
 */
export function policyStage(policy: CompiledPolicy): Stage {
  // Built once: a single denied call, the common case, allocates nothing.
  const byRule = policy.rules.map((_, i) => forbidden(`rule ${i}`))
  const byDefault = forbidden('default')
  return {
    name: 'policy',
    run(ex: Exchange) {
      const calls = ex.calls
      const identity = ex.principal?.identity ?? ''
      const tenant = ex.principal?.tenant ?? ''
      let firstDenied = -1
      let refusal: Refusal | null = null
      for (let i = 0; i < calls.length; i++) {
        const call = calls[i]
        if (!call.gated) continue
        // A completion is judged as the prompts/get or resources/read it completes (call.policyMethod).
        const index = policy.match(identity, tenant, call.policyMethod, call.target)
        if (policy.effectOf(index) === 'allow') continue
        const denial = index < 0 ? byDefault : byRule[index]
        setCause(call, 'policy.denied', denial.reason)
        if (firstDenied < 0) {
          firstDenied = i
          refusal = denial
        }
      }
      if (refusal !== null) ex.denial = ex.batch ? forbidden(`batch refused: element ${firstDenied} denied by ${refusal.reason}`) : refusal
      return CONTINUE
    },
  }
}

/** Answers what the policy stage denied; placed after the budget stage, so a call over budget gets 429 first. */
export const policyVerdictStage: Stage = {
  name: 'policy-verdict',
  run(ex: Exchange) {
    const denial = ex.denial
    if (denial === null) return CONTINUE
    // A single tools/call's denial also speaks to a model (tool_refusals: result), naming the tool it
    // called and never the rule. The name is the caller's, so the text is built here, per denied call
    // (the allow path pays nothing for it), and quoted, escaped and cut (quotedName): a name holding
    // U+2028 must not add a line of its own to what the model reads.
    const call = ex.single
    if (call === null || call.method !== 'tools/call') return denial
    return { ...denial, agentText: `Tool ${quotedName(call.target)} is not allowed for you by policy. Do not retry it.` }
  },
}
