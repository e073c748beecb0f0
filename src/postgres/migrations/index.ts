import { initial } from './001-initial'
import { windowClock } from './002-window-clock'
import { chargedBuckets } from './003-charged-buckets'
import { coalescedAdmission } from './004-coalesced-admission'
import { auditQueries } from './005-audit-queries'
import { revocations } from './006-revocations'
import { handOverInAdmission } from './007-handover-in-admission'
import { tokenRevocations } from './008-token-revocations'
import { auditReasonCode } from './009-audit-reason-code'
import { auditServer } from './010-audit-server'

/** One schema change. Versions are applied in order, each in its own transaction, never edited once shipped. */
export interface Migration {
  readonly version: number
  readonly name: string
  readonly sql: string
}

/** Every migration, oldest first. A new one gets the next version and its own file. */
export const MIGRATIONS: readonly Migration[] = [
  initial,
  windowClock,
  chargedBuckets,
  coalescedAdmission,
  auditQueries,
  revocations,
  handOverInAdmission,
  tokenRevocations,
  auditReasonCode,
  auditServer,
]
