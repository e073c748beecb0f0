import type { RevocationList } from '../auth/revocations'
import { type BudgetAdminParts, getBudgets, resetBudgets } from './budgets'
import { createRevocation, listRevocations, removeRevocation } from './revocations'
import type { AdminRoutes } from './server'

export interface AdminParts extends BudgetAdminParts {
  readonly revocations: RevocationList
}

/** Every admin route: the path, then the method, then the action named `admin/<name>` in the audit trail. */
export function adminRoutes(parts: AdminParts): AdminRoutes {
  return {
    '/budgets': {
      GET: { name: 'budgets.get', run: getBudgets(parts) },
      DELETE: { name: 'budgets.reset', run: resetBudgets(parts) },
    },
    '/revocations': {
      GET: { name: 'revocations.list', run: listRevocations(parts.revocations) },
      POST: { name: 'revocations.create', run: createRevocation(parts.revocations) },
      DELETE: { name: 'revocations.remove', run: removeRevocation(parts.revocations) },
    },
  }
}
