import type { Config } from '../core/config.ts';
import type { Logger } from '../core/logger.ts';
import type { SandboxRecord } from '../store/index.ts';
import type { AppDirectory } from './apps/app-directory.ts';
import type { AppEntry } from './apps/app-labels.ts';
import { installManager, MANAGER_PORT, mintManagerKey, TOOL_MANAGER, waitForTool } from './manager-tool.ts';
import type { RuntimeState, SandboxRuntime } from './runtime/sandbox-runtime.ts';

/** The management tool's address: its own port if published, else the first port of the tool's container. */
export function managerEntry(entries: AppEntry[]): AppEntry | undefined {
  const tools = entries.filter((e) => e.tool === TOOL_MANAGER);
  return tools.find((e) => e.containerPort === MANAGER_PORT) ?? tools[0];
}

/**
 * Spec 2.1 extras: the management tool's address when a container of the tool is published on
 * all interfaces (the template's, or one in the user's own compose project: the image's label
 * tells), and the password the service made for a manager sandbox.
 */
export function managerExtras(record: SandboxRecord, entries: AppEntry[], appUrl: (label: string) => string): Record<string, string> {
  const tool = managerEntry(entries);
  return {
    ...(tool ? { manager_url: appUrl(tool.label) } : {}),
    ...(record.manager_password ? { manager_password: record.manager_password } : {}),
  };
}

/** Starts the management tool in a new manager sandbox and puts its address in the app table. */
export async function installManagerTool(
  parts: { runtime: SandboxRuntime; apps: AppDirectory; config: Config; log: Logger },
  record: SandboxRecord,
  state: RuntimeState,
): Promise<void> {
  if (!record.certs || !state.address || !record.manager_password) throw new Error('a manager sandbox needs engine access and a running container');
  const began = Date.now();
  // image loads take seconds of silence from the engine: a longer idle timeout than the default
  const engine = parts.runtime.innerEngine(record.name, state.address, record.certs, { timeoutMs: 120_000 });
  await installManager({ source: parts.runtime, engine, image: parts.config.managerImage, password: record.manager_password, address: state.address });
  await parts.apps.refresh(record.name, engine);
  parts.log.info({ sandbox: record.name, ms: Date.now() - began }, 'management tool running');
}

/**
 * The export folder's SVC_MANAGER_URL and SVC_MANAGER_TOKEN (a new API key of the tool), or
 * why they are absent. Never wakes the sandbox.
 */
export async function managerAccess(
  parts: { apps: AppDirectory; state: (name: string) => Promise<RuntimeState>; appUrl: (label: string) => string },
  record: SandboxRecord,
): Promise<{ url: string; token: string } | { reason: string }> {
  const tool = managerEntry(parts.apps.appsOf(record.name));
  if (!tool) return { reason: 'this sandbox has no management tool' };
  const url = parts.appUrl(tool.label);
  if (!record.manager_password) return { reason: `the tool at ${url} was started inside the sandbox, so the service does not know its password; make an API key in the tool` };
  const state = await parts.state(record.name);
  if (state.status !== 'running' || !state.address) return { reason: 'the sandbox is not running; start it and export again' };
  // just woken: the engine restarts the tool a moment after the sandbox
  await waitForTool(state.address, tool.hostPort, 30_000);
  const token = await mintManagerKey(state.address, tool.hostPort, record.manager_password, `svc export ${new Date().toISOString().slice(0, 16)}`);
  return { url, token };
}
