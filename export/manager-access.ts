import type { SandboxRecord } from '../store/records.ts';

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

/** Until a provider that can mint API keys is wired in: say why the values are absent. */
export const managerNotIncluded: ManagerAccessProvider = async (_record, extras) =>
  extras.manager_url
    ? { reason: `no API key can be made for the tool at ${extras.manager_url} yet; sign in there as admin with the password shown in the sandbox panel` }
    : { reason: 'this sandbox has no management tool' };
