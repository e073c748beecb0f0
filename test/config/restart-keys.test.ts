import { RESTART_KEYS, keysNeedingRestart } from '../../src/config/restart-keys'
import { parseConfig } from '../../src/config/load'

/** The keys a reload cannot apply come from the `restart` flag of each key in src/config/spec.ts. */
test('every top-level key but budget, policy, policy_file and tool_refusals needs a restart', () => {
  expect(RESTART_KEYS.map(([key]) => key)).toEqual([
    'listen',
    'upstream',
    'upstream_timeout_seconds',
    'upstream_connections',
    'upstream_health_check',
    'max_body_bytes',
    'request_timeout_seconds',
    'max_json_depth',
    'max_batch_messages',
    'max_concurrent_per_identity',
    'session_idle_seconds',
    'max_sessions',
    'max_sessions_per_identity',
    'allowed_origins',
    'allowed_hosts',
    'trusted_proxies',
    'shutdown_grace_seconds',
    'shutdown_delay_seconds',
    'log_level',
    'log_format',
    'features',
    'audit',
    'auth',
    'postgres',
    'admin',
    'tls',
    'metrics',
  ])
})

test('a changed value needs a restart only where the loaded Config differs (a trailing slash on upstream does not)', () => {
  const base = 'auth: { mode: header }\n'
  const load = (text: string) => parseConfig(`${base}${text}`, { env: {}, baseDir: '/srv' })
  const a = load('upstream: http://127.0.0.1:3001\nbudget: { requests_per_window: 5, window_seconds: 60 }\n')
  const b = load('upstream: http://127.0.0.1:3001/\nbudget: { requests_per_window: 6, window_seconds: 60 }\n')
  const c = load('upstream: http://127.0.0.1:3002\nmax_sessions: 5\n')
  expect(keysNeedingRestart(a, b)).toEqual([])
  expect(keysNeedingRestart(a, c)).toEqual(['upstream', 'max_sessions'])
})
