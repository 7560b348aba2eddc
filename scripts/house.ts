/**
 * The floors of the house, in one place: every top-level folder ("room") and top-level file on the
 * floor it stands on. Imports run down: a room imports only rooms on lower floors (never one on its
 * own floor or above), and only through a room's index.ts where it has one. scripts/check-imports.ts
 * holds the code to this table (in `npm test`: test/house/imports.test.ts); docs/architecture.md
 * draws it. A new top-level folder goes here first, or the check fails.
 */
export const FLOORS: Readonly<Record<number, readonly string[]>> = {
  1: ['core', 'queue', 'oci', 'sdk'],
  2: ['store', 'edge', 'user-cli', 'ui'],
  3: ['scanner', 'accounts'],
  4: ['lifecycle'],
  5: ['monitoring', 'files', 'manager', 'export', 'logs', 'exec'],
  6: ['api', 'registry', 'operator'],
  7: ['service.ts'],
  8: ['harness', 'main.ts'],
  9: ['bench', 'scripts'],
  10: ['test'],
};

/** Rooms whose code tests and measures the house: they may reach past an index.ts into the files they test. */
export const TEST_SUPPORT: readonly string[] = ['test', 'harness', 'bench'];

/**
 * Rooms built apart into a bundle of their own (the web UI by Vite): what they take from other rooms
 * must be types only (`import type`), which the build erases.
 */
export const TYPES_ONLY_FROM_OTHERS: readonly string[] = ['ui'];

/** Folders that hold no source of the house. */
export const NOT_ROOMS: readonly string[] = ['node_modules', 'docs', 'deploy', 'fixtures', 'sandbox-image', 'data', 'test-artifacts'];

/**
 * The service keeps its files at most this long and its functions at most this long, but the units
 * docs/architecture.md lists with why they stay ("Long units that stay"); scripts/check-sizes.ts
 * holds the code to it (in `npm test`: test/house/sizes.test.ts).
 */
export const MAX_FILE_LINES = 400;
export const MAX_FUNCTION_LINES = 120;

