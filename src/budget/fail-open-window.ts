const SLOTS = 60

/**
 * Counts events over the last 60 seconds in one-second slots: constant memory and O(1) per event,
 * however many calls fail open during an outage. /readyz reports it so an operator sees that
 * budgets are not being enforced right now, not only that they failed at some point (the metric).
 */
export class FailOpenWindow {
  private readonly counts = new Array<number>(SLOTS).fill(0)
  /** The whole second (epoch) each slot currently counts; a slot from an older minute is stale. */
  private readonly seconds = new Array<number>(SLOTS).fill(-1)

  constructor(private readonly now: () => number = Date.now) {}

  add(): void {
    const second = Math.floor(this.now() / 1000)
    const slot = second % SLOTS
    if (this.seconds[slot] !== second) {
      this.seconds[slot] = second
      this.counts[slot] = 0
    }
    this.counts[slot]++
  }

  /** Events in the current second and the 59 before it. */
  count(): number {
    const oldest = Math.floor(this.now() / 1000) - SLOTS + 1
    let total = 0
    for (let i = 0; i < SLOTS; i++) if (this.seconds[i] >= oldest) total += this.counts[i]
    return total
  }
}
