// Where a sandbox may send packets: the internet and its own apps, and the service's public ports on the
// host; not link-local addresses (169.254.169.254, the cloud metadata service), not the host's other
// listeners (Redis, PostgreSQL, the API port, the upstream registry), not other sandboxes, not the main
// engine's networks, not other machines of the private network (but its nameservers, on port 53). The sandbox engine runs with --iptables=false (a second dockerd with iptables on
// rewrites the main engine's chains), so these rules are the only ones its bridges get; NAT for its
// address pool comes from scripts/sandbox-engine.sh.
import { execFile } from 'node:child_process';
import net from 'node:net';
import { promisify } from 'node:util';
import type { Logger } from '../../core/logger.ts';
import { processAlive } from '../../core/process-alive.ts';
import { SANDBOX_BRIDGE_PREFIX } from './docker-runtime.ts';

const run = promisify(execFile);
const IN = 'SVC-SANDBOX-IN';
const FWD = 'SVC-SANDBOX-FWD';
/** The chain a release with runner hosts kept their pools in (issue 20; removed by issue 34): taken away at start. */
const RUNNER_POOLS = 'SVC-SANDBOX-POOLS';
const PRIVATE = 'SVC-SANDBOX-PRIVATE';
const BRIDGES = `${SANDBOX_BRIDGE_PREFIX}+`;

type Tool = 'iptables' | 'ip6tables';

async function ipt(tool: Tool, args: string[]): Promise<boolean> {
  try {
    await run(tool, ['-w', '5', ...args]);
    return true;
  } catch (err) {
    if (args[0] === '-C' || args[0] === '-N') return false;
    throw new Error(`${tool} ${args.join(' ')} failed: ${(err as { stderr?: string }).stderr?.trim() || (err as Error).message}`);
  }
}

/** Appends `rule` to `chain` unless it is there. */
async function ensure(tool: Tool, chain: string, rule: string[], position?: number): Promise<void> {
  if (await ipt(tool, ['-C', chain, ...rule])) return;
  await ipt(tool, position ? ['-I', chain, String(position), ...rule] : ['-A', chain, ...rule]);
}

/**
 * A chain of ours holding `rules` in that order, jumped to first from each of `from`. Never flushed:
 * several service processes share one host (each has its public port rule in the INPUT chain), so a
 * start only adds what is missing.
 */
async function chain(tool: Tool, name: string, rules: string[][], from: string[]): Promise<void> {
  await ipt(tool, ['-N', name]);
  for (const rule of rules) await ensure(tool, name, rule);
  for (const parent of from) {
    // DOCKER-USER exists only where the main engine manages iptables; its FORWARD rules come after it
    if (parent === 'DOCKER-USER' && !(await ipt(tool, ['-L', parent, '-n']).catch(() => false))) continue;
    // first, before any ACCEPT the main engine puts there (it re-inserts DOCKER-USER's jump at its start)
    const first = (await run(tool, ['-w', '5', '-S', parent])).stdout.split('\n')[1]?.trim();
    if (first === `-A ${parent} -j ${name}`) continue;
    await ipt(tool, ['-D', parent, '-j', name]).catch(() => undefined);
    await ipt(tool, ['-I', parent, '1', '-j', name]);
  }
}

const established = ['-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'ACCEPT'];

/** Installs the chains (idempotent). Public ports are opened one by one with `openPort`. */
export async function installEgressRules(logger: Logger): Promise<void> {
  await chain('iptables', IN, [
    ['-i', BRIDGES, ...established],
    ['-i', BRIDGES, '-j', 'DROP'],
  ], ['INPUT']);
  await chain('iptables', FWD, [
    ['-o', BRIDGES, ...established],
    ['-i', BRIDGES, '-o', BRIDGES, '-j', 'DROP'],
    ['-i', BRIDGES, '-d', '169.254.0.0/16', '-j', 'DROP'],
    ['-i', BRIDGES, '-o', 'docker0', '-j', 'DROP'],
    ['-i', BRIDGES, '-o', 'br-+', '-j', 'DROP'],
    ['-i', BRIDGES, '-j', 'ACCEPT'],
    ['-o', BRIDGES, '-j', 'DROP'],
  ], ['FORWARD', 'DOCKER-USER']);
  // first in FWD (inserted, not appended: a chain from an older version ends with its ACCEPT)
  await ipt('iptables', ['-N', PRIVATE]);
  await ensure('iptables', FWD, ['-i', BRIDGES, '-j', PRIVATE], 1);
  if (await ipt('iptables', ['-C', FWD, '-i', BRIDGES, '-j', RUNNER_POOLS])) {
    // another process starting may be taking it away too: whichever step it did first is done
    for (const step of [['-D', FWD, '-i', BRIDGES, '-j', RUNNER_POOLS], ['-F', RUNNER_POOLS], ['-X', RUNNER_POOLS]]) await ipt('iptables', step).catch(() => false);
  }
  // sandbox networks have no IPv6 addresses, but the host's bridge has a link-local one
  await chain('ip6tables', IN, [['-i', BRIDGES, ...established], ['-i', BRIDGES, '-j', 'DROP']], ['INPUT']);
  await chain('ip6tables', FWD, [['-i', BRIDGES, '-j', 'DROP'], ['-o', BRIDGES, '-j', 'DROP']], ['FORWARD']);
  logger.info('sandbox egress rules installed: internet yes; link-local, host listeners, other sandboxes no');
}

/** Replaces a chain of ours whole in one iptables-restore commit: never a moment without it, nor with half of it. */
async function replaceChain(name: string, rules: string[]): Promise<void> {
  const restore = run('iptables-restore', ['-w', '5', '--noflush']);
  restore.child.stdin!.end(['*filter', `:${name} - [0:0]`, ...rules.map((r) => `-A ${name} ${r}`), 'COMMIT', ''].join('\n'));
  await restore.catch((err: { stderr?: string; message: string }) => {
    throw new Error(`iptables-restore of ${name} failed: ${err.stderr?.trim() || err.message}`);
  });
}

/**
 * Keeps this machine's sandboxes off the private network (SVC_SANDBOX_PRIVATE_NETWORKS, RFC 1918 and
 * 100.64/10 unless set): the other machines of a deployment (Redis, PostgreSQL, service processes)
 * answer anyone there, and a sandbox's packets leave masqueraded as this machine's. This
 * machine's own addresses are the INPUT chain's (the edge port only), so the edge stays reachable
 * whatever its address. The nameservers sandboxes are given (SVC_SANDBOX_DNS) stay reachable on port
 * 53 (even link-local ones), and answers to connections let in go back. Replaced whole at every start.
 */
export async function blockPrivateNetworks(networks: string[], nameservers: string[]): Promise<void> {
  const dns = nameservers.filter((ns) => net.isIPv4(ns));
  await replaceChain(PRIVATE, networks.length === 0 ? [] : [
    `-i ${BRIDGES} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN`,
    // ACCEPT, not RETURN: a nameserver may be link-local (169.254.169.253 in some clouds), which FWD drops
    ...dns.flatMap((ns) => ['udp', 'tcp'].map((proto) => `-i ${BRIDGES} -d ${ns}/32 -p ${proto} -m ${proto} --dport 53 -j ACCEPT`)),
    ...networks.map((cidr) => `-i ${BRIDGES} -d ${cidr} -j DROP`),
  ]);
}

const PORT_OWNER = /^svc-p(\d+)$/;

/**
 * Lets sandboxes reach one public port of the service on the host (the edge: registry pushes).
 * Each service process adds a rule of its own (its pid in a comment) and removes only that one, so
 * the port stays open while any process that serves it runs (a process stopping during another's
 * start, a rolling restart). Rules of processes that are gone, and the one rule without an owner
 * that versions before this one added, are cleared here. `sandboxes`: the chain (first in INPUT) and
 * the interfaces of the sandboxes' side, the Docker runtime's unless said.
 */
export async function openPort(port: number, sandboxes: { chain: string; interfaces: string } = { chain: IN, interfaces: BRIDGES }): Promise<() => Promise<void>> {
  const { chain: into } = sandboxes;
  const accept = ['-i', sandboxes.interfaces, '-p', 'tcp', '-m', 'tcp', '--dport', String(port)];
  const rule = [...accept, '-m', 'comment', '--comment', `svc-p${process.pid}`, '-j', 'ACCEPT'];
  await ensure('iptables', into, rule, 2);
  for (const line of (await run('iptables', ['-w', '5', '-S', into])).stdout.split('\n')) {
    const args = line.trim().split(/\s+/).slice(2); // "-A <chain> …"
    if (args.join(' ').indexOf(`--dport ${port} `) < 0 || args.at(-1) !== 'ACCEPT') continue;
    const at = args.indexOf('--comment');
    const owner = at < 0 ? undefined : PORT_OWNER.exec(args[at + 1]!.replace(/"/g, ''))?.[1];
    if (at < 0 || (owner !== undefined && !processAlive(Number(owner)))) await ipt('iptables', ['-D', into, ...args]).catch(() => undefined);
  }
  return async () => {
    await ipt('iptables', ['-D', into, ...rule]).catch(() => undefined);
  };
}
