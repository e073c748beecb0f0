/** What a LinkedList's node carries: its two links, both null while it is on no list. A node is on one list at most. */
export interface Linked<T> {
  /** Toward the oldest node. */
  listPrev: T | null
  /** Toward the newest node. */
  listNext: T | null
}

/**
 * A doubly linked list through its nodes' own fields, oldest to newest: adding and removing allocate
 * nothing and write a few pointers. For work lists that churn with every request (requests in flight,
 * deadlines waiting, a recency order), where a Set or a Map churned by add and delete both costs more
 * and, in V8, keeps deleted members reachable from obsolete backing tables that were already promoted:
 * every finished request's objects then survived young-generation GCs.
 */
export class LinkedList<T extends Linked<T>> {
  private first: T | null = null
  private last: T | null = null
  private count = 0

  get size(): number {
    return this.count
  }

  get oldest(): T | null {
    return this.first
  }

  get newest(): T | null {
    return this.last
  }

  /** Adds `node` as the newest. It must be on no list. */
  push(node: T): void {
    node.listPrev = this.last
    node.listNext = null
    if (this.last !== null) this.last.listNext = node
    else this.first = node
    this.last = node
    this.count++
  }

  /** Unlinks `node` (nothing when it is not on the list); its links are cleared so it holds no other node alive. */
  remove(node: T): void {
    if (node.listPrev === null && this.first !== node) return
    if (node.listPrev !== null) node.listPrev.listNext = node.listNext
    else this.first = node.listNext
    if (node.listNext !== null) node.listNext.listPrev = node.listPrev
    else this.last = node.listPrev
    node.listPrev = null
    node.listNext = null
    this.count--
  }

  /** Calls `fn` on every node, newest first. `fn` must not add or remove nodes. */
  forEach(fn: (node: T) => void): void {
    for (let node = this.last; node !== null; node = node.listPrev) fn(node)
  }

  /** Removes every node (their links cleared, as remove does). */
  clear(): void {
    while (this.first !== null) this.remove(this.first)
  }
}
