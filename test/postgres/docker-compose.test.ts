import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import yaml from 'js-yaml'
import { startExampleServer } from '../../examples/mcp-server'
import { loadConfig } from '../../src/config/load'
import { mintToken } from '../../src/cli/token'

/** No Docker engine runs here, so the compose files are checked against the config they mount. */
const root = join(__dirname, '..', '..')

interface Service {
  image?: string
  build?: unknown
  entrypoint?: string[]
  command?: string[]
  environment?: Record<string, string>
  volumes?: string[]
  ports?: string[]
  expose?: string[]
  depends_on?: Record<string, { condition: string }>
  healthcheck?: { test?: string[]; disable?: boolean }
  restart?: string
}

function compose(file: string): { services: Record<string, Service>; volumes?: Record<string, unknown> } {
  return yaml.load(readFileSync(join(root, file), 'utf8')) as { services: Record<string, Service> }
}

/** Compose's ${VAR:-default} and ${VAR:?message}, resolved the way `docker compose` would with no .env. */
function interpolate(text: string, env: Record<string, string>): string {
  return text.replace(
    /\$\{(\w+)(?::([-?])([^}]*))?\}/g,
    (_, name: string, op: string | undefined, arg: string) => env[name] ?? (op === '-' ? arg : ''),
  )
}

const base = compose('docker-compose.yml')
const replicas = compose('docker-compose.replicas.yml')
const gateways: Array<[string, Service]> = [
  ['wardline', base.services.wardline],
  ['wardline-2', replicas.services['wardline-2']],
]
const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8')

/** A healthcheck's command as argv: CMD's list as it is, CMD-SHELL's string split on blanks. */
function checkArgv(check: Service['healthcheck']): string[] {
  const [form, ...rest] = check?.test ?? []
  return form === 'CMD-SHELL' ? rest.join(' ').split(/\s+/) : rest
}

test('postgres is version 16 with a healthcheck and a data volume, and Wardline waits for it to be healthy', () => {
  const pg = base.services.postgres
  expect(pg.image).toMatch(/^postgres:16(\.|$|-)/)
  expect(pg.healthcheck?.test?.join(' ')).toMatch(/pg_isready/)
  expect(pg.volumes).toContain('pgdata:/var/lib/postgresql/data')
  expect(base.volumes).toHaveProperty('pgdata')
  for (const [, svc] of gateways) expect(svc.depends_on?.postgres.condition).toBe('service_healthy')
})

test('postgres is healthy only once it takes TCP connections, not while the init server answers on the socket', () => {
  const argv = checkArgv(base.services.postgres.healthcheck)
  expect(argv[0]).toBe('pg_isready')
  // Without a host pg_isready asks the Unix socket, which the image's temporary init server answers
  // while TCP is still closed on a fresh volume; Wardline, started then, gets ECONNREFUSED.
  const host = argv.includes('-h') ? argv[argv.indexOf('-h') + 1] : argv.find((a) => a.startsWith('--host='))?.slice('--host='.length)
  expect(host).toBe('127.0.0.1')
})

test.each(gateways)('%s is restarted when it exits with an error, such as a start with the database unreachable', (_name, svc) => {
  expect(svc.restart).toMatch(/^(on-failure(:\d+)?|unless-stopped|always)$/)
})

test('a service that runs something other than the gateway from its image does not inherit the gateway healthcheck', () => {
  const services = { ...base.services, ...replicas.services }
  const others = Object.entries(services).filter(([, svc]) => svc.build !== undefined && svc.entrypoint !== undefined)
  expect(others.map(([name]) => name)).toContain('mcp-server')
  for (const [, svc] of others) expect(svc.healthcheck?.disable === true || (svc.healthcheck?.test?.length ?? 0) > 0).toBe(true)
})

test('the example MCP server healthcheck passes while the server listens on its port and fails once it is gone', async () => {
  const mcp = base.services['mcp-server']
  expect(mcp.healthcheck?.test?.[0]).toBe('CMD')
  const composePort = mcp.command?.[mcp.command.indexOf('--port') + 1]
  const argv = checkArgv(mcp.healthcheck)
  expect(argv).toContain(composePort)
  // The same command, pointed at a server on a free port instead of the compose file's 3001.
  const server = await startExampleServer({ port: 0, host: '127.0.0.1' })
  const probe = () => {
    const [command, ...args] = argv.map((a) => (a === composePort ? new URL(server.url).port : a))
    return promisify(execFile)(command === 'node' ? process.execPath : command, args, { timeout: 5000 })
  }
  try {
    await expect(probe()).resolves.toBeDefined()
  } finally {
    await server.close()
  }
  await expect(probe()).rejects.toMatchObject({ code: 1 })
})

test.each(gateways)('%s mounts the example config, which validates and agrees with the compose file', (_name, svc) => {
  const mount = (svc.volumes ?? []).find((v) => v.endsWith(':/etc/wardline/wardline.yaml:ro'))
  expect(mount).toBe('./examples/wardline.postgres.yaml:/etc/wardline/wardline.yaml:ro')
  expect(svc.command).toEqual(['serve', '--config', '/etc/wardline/wardline.yaml'])
  const env = Object.fromEntries(
    Object.entries(svc.environment ?? {}).map(([k, v]) => [k, interpolate(v, { WARDLINE_JWT_SECRET: 'x'.repeat(32) })]),
  )
  const config = loadConfig(join(root, 'examples', 'wardline.postgres.yaml'), env)

  expect(config.features).toEqual({ budgetEnforcement: true, postgresStorage: true })
  // The DSN comes from the environment variable the compose file sets, and points at its postgres service.
  expect(readFileSync(join(root, 'examples', 'wardline.postgres.yaml'), 'utf8')).toMatch(/dsn: \$\{WARDLINE_POSTGRES_DSN\}/)
  const dsn = new URL(config.postgres?.dsn ?? '')
  expect(dsn.hostname).toBe('postgres')
  expect(dsn.pathname).toBe(`/${base.services.postgres.environment?.POSTGRES_DB}`)
  expect(dsn.username).toBe(base.services.postgres.environment?.POSTGRES_USER)
  // The upstream is the example server service, on the port it is started with.
  const upstream = new URL(config.upstream!.url)
  const mcp = base.services['mcp-server']
  expect(upstream.hostname).toBe('mcp-server')
  expect(mcp.command).toEqual(expect.arrayContaining(['--port', upstream.port, '--host', '0.0.0.0']))
  expect(mcp.entrypoint).toEqual(['node', 'dist/examples/mcp-server.js'])
  // Wardline listens on every interface of its container, and the published port maps onto that port
  // (on the host's loopback only by default: the next tests).
  expect(config.listen.host).toBe('0.0.0.0')
  expect((svc.ports ?? []).map((p) => publishedPort(p, {}).target)).toEqual([String(config.listen.port)])
  // The image's healthcheck, kept as it is, probes that same port.
  expect(svc.healthcheck).toBeUndefined()
  expect(new URL(/^ENV WARDLINE_HEALTH_URL=(\S+)$/m.exec(dockerfile)?.[1] ?? '').port).toBe(String(config.listen.port))
  // The spill file sits on a volume of its own.
  const spillDir = config.audit.spillFile.slice(0, config.audit.spillFile.lastIndexOf('/'))
  expect(svc.volumes).toEqual(expect.arrayContaining([expect.stringMatching(new RegExp(`^spill-\\d:${spillDir}$`))]))
})

/** A short-syntax `ports:` entry as Compose reads it once interpolated: host IP, host port, container port. */
function publishedPort(entry: string, env: Record<string, string>): { host: string | null; published: string; target: string } {
  const parts = interpolate(entry, env).split(':')
  if (parts.length === 3) return { host: parts[0], published: parts[1], target: parts[2] }
  if (parts.length === 2) return { host: null, published: parts[0], target: parts[1] }
  return { host: null, published: '', target: parts[0] }
}

const everyService = (): Array<[string, Service]> => [...Object.entries(base.services), ...Object.entries(replicas.services)]

test('every published port is on the host loopback by default: /metrics and /readyz answer there without a token', () => {
  const published = everyService().flatMap(([name, svc]) => (svc.ports ?? []).map((p) => [name, publishedPort(p, {})] as const))
  expect(published.map(([name]) => name).sort()).toEqual(['wardline', 'wardline-2'])
  for (const [, port] of published) expect(port.host).toBe('127.0.0.1')
})

test('WARDLINE_PUBLISH_ADDRESS moves every gateway port to the address given, and nothing else', () => {
  for (const [, svc] of gateways) {
    for (const entry of svc.ports ?? []) {
      expect(publishedPort(entry, { WARDLINE_PUBLISH_ADDRESS: '0.0.0.0' }).host).toBe('0.0.0.0')
      expect(publishedPort(entry, { WARDLINE_PUBLISH_ADDRESS: '10.1.2.3' })).toEqual({ ...publishedPort(entry, {}), host: '10.1.2.3' })
    }
  }
  // Postgres and the example MCP server stay unpublished whatever the variable says.
  expect(base.services.postgres.ports).toBeUndefined()
  expect(base.services['mcp-server'].ports).toBeUndefined()
})

test('the compose files need Compose v2, and the docs say so and never give a docker-compose v1 command', () => {
  const raw = yaml.load(readFileSync(join(root, 'docker-compose.yml'), 'utf8')) as Record<string, unknown>
  // Compose Specification: a top-level name and no version key, both of which docker-compose 1.x rejects.
  expect(raw.name).toBe('wardline')
  expect(raw).not.toHaveProperty('version')
  expect(yaml.load(readFileSync(join(root, 'docker-compose.replicas.yml'), 'utf8'))).not.toHaveProperty('version')
  for (const doc of ['README.md', 'docs/postgres.md']) {
    const text = readFileSync(join(root, doc), 'utf8')
    expect(text).toMatch(/Compose v2/)
    expect(text).not.toMatch(/\bdocker-compose (up|down|run|exec|build|logs|ps)\b/)
  }
})

test('the documented way to mint a token for the compose stack runs the image’s CLI with the mounted config', async () => {
  const doc = readFileSync(join(root, 'docs', 'postgres.md'), 'utf8')
  const line = doc.split('\n').find((l) => l.startsWith('docker compose exec wardline '))
  expect(line).toBeDefined()
  const words = (line ?? '').split(/\s+/)
  // `exec` runs in the image's WORKDIR without its ENTRYPOINT, so the command repeats the entrypoint.
  const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(stage('runtime'))?.[1] ?? '[]') as string[]
  expect(stage('runtime')).toMatch(/^WORKDIR \/app$/m)
  expect(words.slice(0, 4)).toEqual(['docker', 'compose', 'exec', 'wardline'])
  expect(words.slice(4, 4 + entrypoint.length)).toEqual(entrypoint)
  expect(words[4 + entrypoint.length]).toBe('token')
  const option = (name: string) => words[words.indexOf(name) + 1]
  expect(option('--config')).toBe('/etc/wardline/wardline.yaml')
  // The mounted config requires a tenant, so the documented command must pass one.
  const env = Object.fromEntries(
    Object.entries(base.services.wardline.environment ?? {}).map(([k, v]) => [k, interpolate(v, { WARDLINE_JWT_SECRET: 's'.repeat(40) })]),
  )
  const config = loadConfig(join(root, 'examples', 'wardline.postgres.yaml'), env)
  expect(config.auth.mode === 'jwt' && config.auth.jwt.requireTenant).toBe(true)
  expect(words).toContain('--tenant')
  const jwt = await mintToken(config, { sub: option('--sub'), tenant: option('--tenant'), ttlSeconds: 60 })
  expect(jwt.split('.')).toHaveLength(3)
  await expect(mintToken(config, { sub: option('--sub'), ttlSeconds: 60 })).rejects.toThrow(/--tenant is required/)
})

test('two replicas share one database but publish different ports and keep separate spill volumes', () => {
  const [a, b] = gateways.map(([, s]) => s)
  expect(a.environment?.WARDLINE_POSTGRES_DSN).toBe(b.environment?.WARDLINE_POSTGRES_DSN)
  expect(a.ports).not.toEqual(b.ports)
  const spill = (s: Service) => (s.volumes ?? []).find((v) => v.startsWith('spill-'))
  expect(spill(a)).not.toBe(spill(b))
})

/** The Dockerfile's stages in order: the image each starts from, the name after AS, and its text. */
const stages = dockerfile
  .split(/^FROM /m)
  .slice(1)
  .map((text) => {
    const [from, , name] = text.slice(0, text.indexOf('\n')).split(/\s+/)
    return { from, name, text }
  })
const stage = (name: string) => stages.find((s) => s.name === name)?.text ?? ''

test('the Dockerfile builds dist/ in a build stage and runs production dependencies as a non-root user', () => {
  expect(stage('build')).toMatch(/tsc -p tsconfig.build.json/)
  const runtime = stage('runtime')
  expect(runtime).toMatch(/npm ci --omit=dev/)
  expect(runtime).toMatch(/COPY --from=build \/app\/dist/)
  expect(runtime).toMatch(/^USER node$/m)
  expect(runtime).toMatch(/ENTRYPOINT \["node", "dist\/src\/main.js"\]/)
  // The image carries the license package.json names (Apache-2.0 asks that recipients get a copy).
  expect(runtime).toMatch(/^COPY LICENSE \.\/$/m)
  expect((JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { license: string }).license).toBe('Apache-2.0')
  expect(readFileSync(join(root, 'LICENSE'), 'utf8')).toMatch(
    /^\s*Apache License\s+Version 2\.0, January 2004\s+http:\/\/www\.apache\.org\/licenses\/\s/,
  )
})

test('a build without a target gives the gateway image, and the example MCP server service builds the example target', () => {
  const last = stages[stages.length - 1]
  expect(last.from).toBe('runtime')
  expect(last.text).not.toMatch(/^(RUN|COPY|ENTRYPOINT|CMD|HEALTHCHECK) /m)
  for (const [, svc] of gateways) expect(svc.build).toBe('.')
  expect(base.services['mcp-server'].build).toEqual({ context: '.', target: 'example' })
  expect(stages.find((s) => s.name === 'example')?.from).toBe('runtime')
})

test('the example target adds every package the example server imports that the runtime leaves out', () => {
  const { dependencies } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }
  const source = readFileSync(join(root, 'examples', 'mcp-server.ts'), 'utf8')
  const imported = [...source.matchAll(/from '((?:@[^/']+\/)?[^/'.][^/']*)/g)].map((m) => m[1]).filter((name) => !name.startsWith('node:'))
  expect(imported).toContain('@modelcontextprotocol/sdk')
  const query = /npm query '([^']*)'/.exec(stage('example-deps'))?.[1] ?? ''
  for (const name of imported.filter((n) => !(n in dependencies))) expect(query.split(/,\s*/)).toContain(`#${name}`)
  expect(stage('example')).toMatch(/^COPY --from=example-deps \/example\/node_modules \.\/node_modules$/m)
})
