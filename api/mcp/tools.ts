import { Readable } from 'node:stream';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { authorizeSandbox, type Caller } from '../../accounts/index.ts';
import { errors, retryAfterOf } from '../../core/errors.ts';
import { MAX_TIMEOUT_S, OUTPUT_LIMIT, type SandboxCommands } from '../../exec/index.ts';
import { listVolumes, type SandboxFiles } from '../../files/index.ts';
import { MAX_RECENT_LINES, recentLogs } from '../../logs/index.ts';
import type { Lifecycle, SandboxView } from '../../lifecycle/index.ts';
import type { Store } from '../../store/index.ts';

export interface McpDeps {
  store: Store;
  lifecycle: Lifecycle;
  files: SandboxFiles;
  commands: SandboxCommands;
}

const PATH_HELP = 'Absolute path in /root (default), /home, /srv, /opt, or a volume path /var/lib/docker/volumes/<volume>/_data (see list_sandbox_volumes). A relative path is taken from /root.';

/**
 * The MCP server of one request: the spec 4.2 file tools plus the sandbox verbs an agent needs
 * for a whole session. Every tool calls the same operations as the HTTP routes, under the same
 * authorisation, so the rules (paths, links, limits, asleep = 409) are the same.
 */
export function buildMcpServer(deps: McpDeps, principal: Caller, audit: (action: string, entry: { sandbox: string; detail: string }) => Promise<void>): McpServer {
  const { store, lifecycle, files, commands } = deps;
  const server = new McpServer(
    { name: 'svc-sandboxes', version: '1.0.0' },
    { instructions: 'Tools for the caller\'s sandboxes. `sandbox` may be left out with a token limited to one sandbox. run_sandbox_command wakes an asleep sandbox; the file and log tools need it running: call start_sandbox first if a tool says it is asleep. A sandbox whose status is unavailable is on a host that does not answer: nothing is lost, but no tool can act on it until it shows its real status again; wait and ask get_sandbox_status again.' },
  );
  const sandboxArg = z.string().min(1).max(64).optional().describe('Sandbox name, e.g. svc-demo; optional with a token limited to one sandbox');

  const sandboxOf = async (name: string | undefined) => {
    const chosen = name ?? principal.sandbox;
    if (!chosen) throw new errors.BadRequest('name the sandbox (argument "sandbox"); list_sandboxes shows them');
    return (await authorizeSandbox(store, principal, chosen, 'use')).name;
  };

  server.registerTool('list_sandboxes', {
    description: "The caller's sandboxes with status, idle settings and app addresses.",
    inputSchema: {},
  }, () => result(async () => {
    const records = principal.sandbox
      ? [await store.sandboxes.get(principal.sandbox)].filter((r) => r !== undefined)
      : await store.sandboxes.listByOwner(principal.user.id, { secrets: false });
    return lifecycle.views.list(records);
  }));

  server.registerTool('get_sandbox_status', {
    description: 'One sandbox: status (running, exited = asleep, deep_sleep, or unavailable = its host does not answer, try again later), engine address, app addresses, idle settings. Engine certificates are left out; get them from GET /api/sandboxes/:name.',
    inputSchema: { sandbox: sandboxArg },
  }, ({ sandbox }) => result(async () => withoutSecrets(await lifecycle.views.view(await lifecycle.record(await sandboxOf(sandbox))))));

  server.registerTool('start_sandbox', {
    description: 'Wake the sandbox; returns once it runs (a few seconds from asleep, about 30 s from deep sleep).',
    inputSchema: { sandbox: sandboxArg },
  }, ({ sandbox }) => result(async () => {
    const name = await sandboxOf(sandbox);
    await lifecycle.start(name);
    return withoutSecrets(await lifecycle.views.view(await lifecycle.record(name)));
  }));

  server.registerTool('keep_sandbox_awake', {
    description: 'Restart the idle countdown of a running sandbox (never wakes a sleeping one).',
    inputSchema: { sandbox: sandboxArg },
  }, ({ sandbox }) => result(async () => withoutSecrets(await lifecycle.keepAwake(await sandboxOf(sandbox)))));

  server.registerTool('fork_sandbox', {
    description: 'Fork a sandbox: a new sandbox with a copy of its files, inner images and containers (restartable ones run in the fork), its own engine certificates and addresses. A running source pauses for the copy (seconds per GB) and goes on; returns the fork once it runs. Not with a token limited to one sandbox.',
    inputSchema: { sandbox: sandboxArg, name: z.string().min(1).max(64).describe('The fork\'s name, e.g. demo-2 (becomes svc-demo-2)') },
  }, ({ sandbox, name }) => result(async () => {
    if (principal.sandbox) throw new errors.Forbidden('a token limited to one sandbox cannot fork sandboxes (a fork is a new sandbox)');
    const source = await lifecycle.record(await sandboxOf(sandbox));
    const view = await lifecycle.fork(await lifecycle.owner(source), source, name);
    await audit('sandbox.fork', { sandbox: view.name, detail: JSON.stringify({ from: source.name }) });
    return withoutSecrets(view);
  }));

  server.registerTool('run_sandbox_command', {
    description: `Run a command as root in the sandbox (in /root) and get { exit_code, stdout, stderr, truncated, timed_out }. Wakes an asleep sandbox first. Each output is cut at ${OUTPUT_LIMIT} bytes.`,
    inputSchema: {
      sandbox: sandboxArg,
      command: z.union([z.string().min(1).max(65536), z.array(z.string().max(65536)).min(1).max(4096)]).describe('A shell string (run by sh -c) or an argv array'),
      stdin: z.string().optional().describe('Text for the command\'s stdin'),
      timeout: z.number().int().min(1).max(MAX_TIMEOUT_S).optional().describe('Seconds (default 60); then the command is killed'),
    },
  }, ({ sandbox, command, stdin, timeout }) => result(async () => commands.run(await sandboxOf(sandbox), { command, stdin, timeout })));

  server.registerTool('read_sandbox_logs', {
    description: 'The last lines of the sandbox\'s app containers (running or stopped), in time order: container, service, project, stream, time, line.',
    inputSchema: {
      sandbox: sandboxArg,
      tail: z.number().int().min(1).max(MAX_RECENT_LINES).optional().describe('Lines (default 100)'),
      container: z.string().min(1).max(128).optional().describe('Only this container (name or id prefix)'),
    },
  }, ({ sandbox, tail, container }) => result(async () => recentLogs(await lifecycle.runningEngine(await sandboxOf(sandbox)), { tail: tail ?? 100, container })));

  server.registerTool('list_sandbox_files', {
    description: 'List a folder: entries with name, type (dir, file, link, other), size and mtime, folders first.',
    inputSchema: { sandbox: sandboxArg, path: z.string().max(4096).optional().describe(PATH_HELP) },
  }, ({ sandbox, path }) => result(async () => files.list(await sandboxOf(sandbox), path)));

  server.registerTool('read_sandbox_file', {
    description: 'Read a UTF-8 text file of up to 1 MB. Returns { path, text }.',
    inputSchema: { sandbox: sandboxArg, path: z.string().min(1).max(4096).describe(PATH_HELP) },
  }, ({ sandbox, path }) => result(async () => files.readText(await sandboxOf(sandbox), path)));

  server.registerTool('write_sandbox_file', {
    description: 'Write a text file (UTF-8), replacing it if it exists; the folder must exist. Owner root, mode 0644.',
    inputSchema: {
      sandbox: sandboxArg,
      path: z.string().min(1).max(4096).describe(PATH_HELP),
      text: z.string().describe('The whole content of the file'),
    },
  }, ({ sandbox, path, text }) => result(async () => {
    const bytes = Buffer.from(text, 'utf8');
    return files.upload(await sandboxOf(sandbox), path, Readable.from([bytes]), bytes.length);
  }));

  server.registerTool('create_sandbox_folder', {
    description: 'Create a folder and any missing parents (owner root, mode 0644).',
    inputSchema: { sandbox: sandboxArg, path: z.string().min(1).max(4096).describe(PATH_HELP) },
  }, ({ sandbox, path }) => result(async () => files.mkdir(await sandboxOf(sandbox), path)));

  server.registerTool('delete_sandbox_file', {
    description: 'Delete a file, a link, or a folder with everything in it. Top folders and a volume\'s own folder cannot be deleted.',
    inputSchema: { sandbox: sandboxArg, path: z.string().min(1).max(4096).describe(PATH_HELP) },
  }, ({ sandbox, path }) => result(async () => files.remove(await sandboxOf(sandbox), path)));

  server.registerTool('list_sandbox_volumes', {
    description: 'Local volumes of the sandbox engine: name, path (usable with the file tools), compose project, and the containers mounting each.',
    inputSchema: { sandbox: sandboxArg },
  }, ({ sandbox }) => result(async () => listVolumes(lifecycle, await sandboxOf(sandbox))));

  return server;
}

/** Tool output: JSON text; an error is a tool error with the same code and message as the API's. */
async function result(work: () => Promise<unknown>): Promise<CallToolResult> {
  try {
    const value = await work();
    return { content: [{ type: 'text', text: JSON.stringify(value, null, 2) }] };
  } catch (err) {
    const e = err as { code?: string; message?: string };
    if (!e.code?.startsWith('SVC_')) throw err;
    const retry = retryAfterOf(err);
    return { isError: true, content: [{ type: 'text', text: `${e.code}: ${e.message}${retry ? ` (retry after ${retry} s)` : ''}` }] };
  }
}

function withoutSecrets(view: SandboxView): Omit<SandboxView, 'ca_cert' | 'client_cert' | 'client_key'> {
  const { ca_cert: _ca, client_cert: _cert, client_key: _key, ...rest } = view;
  return rest;
}
