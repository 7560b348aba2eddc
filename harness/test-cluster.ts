import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import type { Mover } from '../lifecycle/runtime/host-operations.ts';
import { openStore, type Store } from '../store/index.ts';

const run = promisify(execFile);
const RIG = path.join(import.meta.dirname, '../scripts/test-cluster.sh');

/** scripts/test-cluster.sh with its arguments (up 3, down, kill m2, env). */
export const rig = (...args: string[]) => run('bash', [RIG, ...args], { maxBuffer: 1 << 20 });

/** The cluster up (3 members) and its `env` lines in this process's environment, as a shell's eval takes them. */
export async function clusterUp(): Promise<void> {
  await rig('up', '3');
  for (const m of (await rig('env')).stdout.matchAll(/^export (\w+)=(.*)$/gm)) process.env[m[1]!] = m[2]!;
}

/** The service's address on the rig's bridge: what the members' firewall lets into sandboxes. */
export const SERVICE_ADDRESS = '100.64.0.1';

/**
 * A store of its own for a test's sandbox records (SQLite in a temporary folder), and the Mover a
 * process that moves sandboxes gives HostOperations: here with no lease to take and nobody to tell.
 */
export async function moverStore(name: string): Promise<{ store: Store; mover: Mover; close(): Promise<void> }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${name}-`));
  const store = await openStore(`sqlite://${path.join(dir, 'store.sqlite')}`, { secretKeyFile: path.join(dir, 'secret.key') });
  return {
    store,
    mover: {
      store, exclusive: (_n, work) => work(), goingDown: async () => undefined,
      logger: pino({ level: 'silent' }), deadlineMs: 600_000,
    },
    async close() {
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A sandbox's record, as the service keeps it (a move refuses a sandbox it has no record of). */
export async function recordSandbox(store: Store, name: string): Promise<void> {
  await store.sandboxes.insert({ name, owner_id: 'u-test', template: 'default', idle_timeout: '1h', deep_sleep_after: '24h', created_at: new Date().toISOString() });
}

/**
 * "Another machine" beside this one, as in test/isolation/escapes.test.ts: a network namespace behind a
 * veth, at a private address (192.168.251.2, as a Redis or PostgreSQL machine would be) and at a public
 * one (198.51.100.2, the internet's stand-in), each answering `<name>-secret` on port 7000.
 */
export async function outsideMachine(ns: string): Promise<{ close(): Promise<void> }> {
  const veth = `ve${ns.slice(-8)}`;
  const sh = (script: string) => run('sh', ['-ec', script]);
  await sh(`ip netns add ${ns}; ip link add ${veth} type veth peer name eth0 netns ${ns}
    ip addr add 192.168.251.1/30 dev ${veth}; ip link set ${veth} up; ip route add 198.51.100.2/32 dev ${veth}
    ip -n ${ns} addr add 192.168.251.2/30 dev eth0; ip -n ${ns} addr add 198.51.100.2/32 dev eth0
    ip -n ${ns} link set eth0 up; ip -n ${ns} link set lo up; ip -n ${ns} route add default via 192.168.251.1`);
  const listener: ChildProcess = spawn('ip', ['netns', 'exec', ns, 'socat', 'TCP-LISTEN:7000,fork,reuseaddr', 'SYSTEM:echo machine-secret'], { stdio: 'ignore' });
  return {
    async close() {
      listener.kill();
      await sh(`ip link del ${veth} || true; ip netns del ${ns}`);
    },
  };
}
