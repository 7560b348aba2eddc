import type { SandboxRecord } from '../store/index.ts';

/**
 * What an export folder says about the sandbox's management tool (spec 1.7): its address and an
 * API key for `SVC_MANAGER_URL` / `SVC_MANAGER_TOKEN`, or the reason they are absent, which
 * becomes the line `# Manager: not included (<reason>)`.
 */
export type ManagerAccess = { url: string; token: string } | { reason: string };

/**
 * Mints the management tool's values for one export. The manager side (issue 11) provides the
 * real one; `extras` are the sandbox record's extras (spec 2.1), empty where they are unknown
 * (the operator CLI reads only the store).
 */
export type ManagerAccessProvider = (record: SandboxRecord, extras: Record<string, string>) => Promise<ManagerAccess>;

/**
 * For exports made without reaching the sandbox (the operator CLI reads only the store, and knows
 * no extras): says why the values are absent, and where an export that has them is made.
 */
export const managerNotIncluded: ManagerAccessProvider = async (record, extras) =>
  extras.manager_url || record.manager_password
    ? { reason: `made without reaching the sandbox's management tool; export through the API or the web UI (GET /api/sandboxes/${record.name}/export) for its address and a key` }
    : { reason: 'this sandbox has no management tool' };
