const { availableParallelism } = require('node:os')

/** @type {import('jest').Config} */
module.exports = {
  // More workers than cores: most test time is waiting on sockets, child processes, Postgres and
  // deliberate windows (an outage, a refresh cycle), not CPU. Over a whole run on a 2-core machine
  // the jest processes used about one core; jest's default (cores - 1) would run one file at a time.
  maxWorkers: Math.max(3, availableParallelism() - 1),
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  // jose 6 ships only ESM; let swc turn it into CommonJS like our own code
  transformIgnorePatterns: ['/node_modules/(?!jose/)'],
  testTimeout: 30000,
  // One Postgres server for the run (env URL, local 5432, or a throwaway embedded one); each test
  // file then creates its own database with test/helpers/postgres.ts.
  globalSetup: '<rootDir>/test/helpers/postgres-global-setup.ts',
  globalTeardown: '<rootDir>/test/helpers/postgres-global-teardown.ts',
}
