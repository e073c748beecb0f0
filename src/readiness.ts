/** A dependency /readyz asks about. `check` must settle quickly (bound it inside). */
export interface ReadinessCheck {
  readonly name: string
  check(): Promise<{ ok: boolean; detail?: Record<string, unknown> }>
}
