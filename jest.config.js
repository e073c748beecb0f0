/** @type {import('jest').Config} */
module.exports = {
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
