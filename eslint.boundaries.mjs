// The import rules of docs/architecture.md ("Imports point one way"), checked by `npm run lint`: an
// import that crosses a boundary the wrong way fails it. Each folder of src/ is one element; a file
// may import its own folder freely, and another element only where a policy below allows it. Kept in
// a file of its own so test/lint-boundaries.test.ts can run exactly these rules on a probe.
import boundaries from 'eslint-plugin-boundaries'
import tseslint from 'typescript-eslint'

/** The folders that hold a stage and what it alone needs: none imports another. */
export const FEATURES = ['http', 'auth', 'session', 'concurrency', 'jsonrpc', 'audit', 'policy', 'budget', 'upstream']

/** What each kind of element may import besides its own folder (`leaf`: a file directly in src/). */
const LOWER = {
  leaf: ['leaf'],
  json: ['leaf'],
  pipeline: ['leaf'],
  mcp: ['leaf', 'pipeline'],
  config: ['leaf', 'mcp'],
  postgres: ['leaf', 'config'],
  net: ['leaf', 'config'],
  feature: ['leaf', 'json', 'pipeline', 'mcp', 'config', 'postgres'],
  admin: ['leaf', 'json', 'pipeline', 'mcp', 'config', 'postgres', 'net', 'feature'],
  server: ['leaf', 'json', 'pipeline', 'mcp', 'config', 'postgres', 'net', 'feature', 'admin'],
  cli: ['leaf', 'json', 'pipeline', 'mcp', 'config', 'postgres', 'net', 'feature', 'admin', 'server'],
}

export default [
  {
    files: ['src/**/*.ts'],
    languageOptions: { parser: tseslint.parser },
    plugins: { boundaries },
    settings: {
      'import/resolver': { node: { extensions: ['.ts'] } },
      'boundaries/elements': [
        { type: 'feature', pattern: `src/(${FEATURES.join('|')})`, capture: ['name'], partialMatch: false },
        ...['json', 'pipeline', 'mcp', 'config', 'postgres', 'net', 'admin', 'server', 'cli'].map((type) => ({
          type,
          pattern: `src/${type}`,
          partialMatch: false,
        })),
        // What is left: the files directly in src/ (errors, log, escape, …), which import only each other.
        { type: 'leaf', pattern: 'src', partialMatch: false },
      ],
    },
    rules: {
      'boundaries/dependencies': [
        'error',
        {
          default: 'disallow',
          policies: [
            ...Object.entries(LOWER).map(([type, types]) => ({ from: { element: { type } }, allow: { to: { element: { types } } } })),
            // The entry point (the CLI's dispatch) may import anything.
            { from: { file: { path: '**/src/main.ts' } }, allow: { to: { element: { type: '*' } } } },
            // The shape every feature's open() returns (feature.ts) names the Config a reload hands it.
            { from: { file: { path: '**/src/feature.ts' } }, allow: { to: { element: { type: 'config' } } } },
          ],
        },
      ],
    },
  },
]
