import type Docker from 'dockerode';
import { hashPassword } from '../core/passwords.ts';
import { boundedRequest } from '../core/bounded-request.ts';
import { pollUntil } from '../core/poll.ts';
import { COMPOSE_PROJECT, COMPOSE_SERVICE, SUBDOMAIN_LABEL } from './apps/app-labels.ts';
import { statusCode } from './runtime/engine-client.ts';

/** The TOOL_LABEL value of the management tool's image (scripts/build-manager-image.sh). */
export const TOOL_MANAGER = 'manager';
/** The compose project, service and port of the tool in a manager sandbox. */
export const MANAGER_PROJECT = 'manager';
export const MANAGER_PORT = 9000;
const READY_TIMEOUT_MS = 60_000;
const MAX_ANSWER_BYTES = 64 * 1024;
/** The form of a Portainer API key: the only thing a (hostile) tool may hand back for an export. */
const API_KEY = /^ptr_[A-Za-z0-9+/]{43}=$/;

/** What the installer needs of the engine that runs sandboxes (where setup copies the image). */
export interface ToolImageSource {
  /** The image's svc.inputs label, or undefined if the host engine lacks the image. */
  imageInputs(image: string): Promise<string | undefined>;
  /** `docker save` of the image. */
  saveImage(image: string): Promise<NodeJS.ReadableStream>;
}

/**
 * Starts the tool in a sandbox's own engine as compose project `manager`: the image loaded from
 * the host engine (only when the sandbox lacks this build), the engine socket mounted, its data in
 * the named volume `manager_data`, published on all interfaces with the label that gives it the
 * app address `<sandbox>-manager` (spec 4.3), restarted by the engine when the sandbox wakes.
 * Resolves once GET /api/status answers JSON.
 */
export async function installManager(opts: {
  source: ToolImageSource;
  engine: Docker;
  image: string;
  password: string;
  /** The sandbox container's address, where the published port answers. */
  address: string;
}): Promise<void> {
  const { engine, image } = opts;
  const want = await opts.source.imageInputs(image);
  if (want === undefined) throw new Error(`the management tool image ${image} is missing on the engine that runs sandboxes; run "npm run setup" (it copies the image there)`);
  const have = await engine.getImage(image).inspect().then((i) => i.Config.Labels?.['svc.inputs'], (err) => {
    if (statusCode(err) === 404) return undefined;
    throw err;
  });
  if (have !== want) {
    const loaded = await engine.loadImage(await opts.source.saveImage(image), { quiet: true });
    await new Promise<void>((resolve, reject) => engine.modem.followProgress(loaded, (err: Error | null, out: Array<{ error?: string }>) => {
      const failed = err?.message ?? out.find((line) => line.error)?.error;
      if (failed) reject(new Error(`loading the tool image into the sandbox failed: ${failed}`));
      else resolve();
    }));
  }
  const project = { [COMPOSE_PROJECT]: MANAGER_PROJECT };
  try {
    await engine.createNetwork({ Name: `${MANAGER_PROJECT}_default`, Driver: 'bridge', Labels: { ...project, 'com.docker.compose.network': 'default' } });
  } catch (err) {
    if (statusCode(err) !== 409) throw err;
  }
  await engine.createVolume({ Name: `${MANAGER_PROJECT}_data`, Labels: { ...project, 'com.docker.compose.volume': 'data' } });
  const container = await engine.createContainer({
    name: `${MANAGER_PROJECT}-manager-1`,
    Image: image,
    Env: [`MANAGER_ADMIN_PASSWORD_HASH=${await hashPassword(opts.password)}`],
    Labels: { ...project, [COMPOSE_SERVICE]: 'manager', 'com.docker.compose.container-number': '1', 'com.docker.compose.oneoff': 'False', [SUBDOMAIN_LABEL]: 'manager' },
    ExposedPorts: { [`${MANAGER_PORT}/tcp`]: {} },
    HostConfig: {
      Binds: ['/var/run/docker.sock:/var/run/docker.sock', `${MANAGER_PROJECT}_data:/data`],
      PortBindings: { [`${MANAGER_PORT}/tcp`]: [{ HostIp: '', HostPort: String(MANAGER_PORT) }] },
      RestartPolicy: { Name: 'unless-stopped' },
      NetworkMode: `${MANAGER_PROJECT}_default`,
      // a line per request: bounded, so a long-lived sandbox's disk does not fill with them
      LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } },
    },
  });
  await container.start();
  await waitForTool(opts.address, MANAGER_PORT, READY_TIMEOUT_MS);
}

/** One bounded JSON request to the tool at the sandbox's address; the answer is the tool's (hostile) bytes. */
async function toolRequest(address: string, port: number, method: string, path: string, headers: Record<string, string> = {}, body?: unknown): Promise<{ status: number; json: unknown }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const { status, text } = await boundedRequest(
    { host: address, port, method, path, headers: { ...headers, ...(payload ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}) } },
    { what: 'the management tool', maxBytes: MAX_ANSWER_BYTES, timeoutMs: 10_000 },
    payload,
  );
  let json: unknown;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status, json };
}

/** Resolves once the tool's GET /api/status answers JSON; rejects after `timeoutMs`. */
export async function waitForTool(address: string, port: number, timeoutMs: number): Promise<void> {
  await pollUntil('the management tool did not answer', async () => {
    const { status, json } = await toolRequest(address, port, 'GET', '/api/status');
    return (status === 200 && !!json && typeof json === 'object') || `answered ${status}`;
  }, { timeoutMs });
}

/**
 * A new API key of the tool (for an export folder's SVC_MANAGER_TOKEN): signs in as admin and asks
 * for a key as Portainer clients do. Only a key of the tool's own form is accepted.
 */
export async function mintManagerKey(address: string, port: number, password: string, description: string): Promise<string> {
  const auth = await toolRequest(address, port, 'POST', '/api/auth', {}, { username: 'admin', password });
  const jwt = (auth.json as { jwt?: unknown } | undefined)?.jwt;
  if (auth.status !== 200 || typeof jwt !== 'string' || jwt.length > 4096) throw new Error(`signing in to the tool failed (${auth.status})`);
  const made = await toolRequest(address, port, 'POST', '/api/users/1/tokens', { authorization: `Bearer ${jwt}` }, { password, description });
  const key = (made.json as { rawAPIKey?: unknown } | undefined)?.rawAPIKey;
  if (made.status !== 201 || typeof key !== 'string' || !API_KEY.test(key)) throw new Error(`the tool made no API key (${made.status})`);
  return key;
}
