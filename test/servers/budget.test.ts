import { MemoryBudgetStore } from '../../src/budget/memory-store'
import { serverBudgetSuite } from './budget-suite'

serverBudgetSuite('memory store', () => Promise.resolve(new MemoryBudgetStore()))
