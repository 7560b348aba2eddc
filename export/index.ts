import { addressesOf } from '../core/addresses.ts';
import type { Config } from '../core/config.ts';
import { errors } from '../core/errors.ts';
import { createToken } from '../accounts/index.ts';
import { engineHost } from '../lifecycle/index.ts';
import type { Store, SandboxRecord, UserRecord } from '../store/index.ts';
import { exportFolder, exportFolderName } from './export-folder.ts';
import type { ManagerAccess, ManagerAccessProvider } from './manager-access.ts';
import type { ZipEntry } from './zip.ts';

export { exportFolderName } from './export-folder.ts';
export { managerNotIncluded, type ManagerAccess, type ManagerAccessProvider } from './manager-access.ts';
export { zipEntries, type ZipEntry } from './zip.ts';
export { writeFolder } from './write-folder.ts';
export { agentGuide, llmsTxt } from './agent-guide.ts';

export interface ExportDeps {
  store: Store;
  config: Pick<Config, 'domain' | 'httpsPort'>;
  serviceCa: () => Promise<string | null>;
  manager: ManagerAccessProvider;
}

/**
 * The export folder of one sandbox for its owner: mints a new access token limited to the
 * sandbox (listed under the owner's tokens as the export's) and returns the folder's files.
 * Refuses a sandbox without engine certificates (needs-certs) before minting anything.
 */
export async function exportSandbox(
  deps: ExportDeps,
  owner: UserRecord,
  record: SandboxRecord,
  extras: Record<string, string> = {},
): Promise<{ folder: string; entries: ZipEntry[] }> {
  if (record.owner_id !== owner.id) throw new errors.Forbidden('only the owner can export a sandbox: the folder holds a token acting as them');
  if (!record.certs) throw new errors.EngineAccessDisabled(record.name, record.name);
  const manager: ManagerAccess = await deps.manager(record, extras).catch((err: Error) => ({ reason: `the management tool's values could not be made: ${err.message}` }));
  const serviceCa = await deps.serviceCa();
  const now = new Date();
  const name = `export of ${record.name}, ${now.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
  const { value } = await createToken(deps.store, { userId: owner.id, sandbox: record.name, name });
  const entries = exportFolder({
    sandbox: record.name,
    user: owner.name,
    certs: record.certs,
    token: { value, name },
    addresses: addressesOf(deps.config),
    serviceCa,
    manager,
    engineHost: engineHost(record.name, deps.config.domain),
    now,
  });
  return { folder: exportFolderName(record.name), entries };
}
