import { COMPOSE_PROJECT, COMPOSE_SERVICE } from '../../core/compose-labels.ts';
import { visibilityOf, type AppVisibility } from '../../edge/index.ts';
import { isSandboxName, NAME_PREFIX, shortName } from '../names.ts';

export { COMPOSE_PROJECT, COMPOSE_SERVICE };
/** The user's own label choosing the app's address (spec 4.3, 1). */
export const SUBDOMAIN_LABEL = 'tunnel.subdomain';
/** Who may reach the container's addresses (issue 35): `public` (the default), `authenticated`, `owner`. */
export const VISIBILITY_LABEL = 'tunnel.visibility';
/** Carried by a tool's image (the management tool: `manager`); containers inherit it. */
export const TOOL_LABEL = 'svc.tool';

/**
 * Suffixes the edge reads as engine, shell or TCP twin; an app label never ends with them. Nor
 * with `-shell`: its TCP twin `<label>-tcp` would read as the shell of a sandbox named `<label>`.
 */
const RESERVED_SUFFIXES = ['-engine', '-shell-tcp', '-tcp', '-shell'];
const GENERATED = /-port\d+$/;
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

export interface PublishedPort {
  containerPort: number;
  hostPort: number;
  /** As the engine reports it: '', '0.0.0.0' or '::' mean all interfaces. */
  hostIp: string;
}

export interface AppContainer {
  /** Without the leading slash. */
  name: string;
  labels: Record<string, string>;
  running: boolean;
  ports: PublishedPort[];
}

/** One app address: a published port of a container, reachable on the sandbox's address. */
export interface AppEntry {
  label: string;
  sandbox: string;
  container: string;
  project?: string;
  service?: string;
  containerPort: number;
  hostPort: number;
  /** The app listens on 127.0.0.1 only: its address answers with an error saying so. */
  loopbackOnly?: boolean;
  /** The container runs a tool the service knows (its TOOL_LABEL), such as the management tool. */
  tool?: string;
  /** Its VISIBILITY_LABEL when not public. */
  visibility?: Exclude<AppVisibility, 'public'>;
}

function dnsSafe(s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/-+/g, '-').replace(/^-|-$/g, '');
}

function publishedOnAllInterfaces(p: PublishedPort): boolean {
  return p.hostIp === '' || p.hostIp === '0.0.0.0' || p.hostIp === '::';
}

/**
 * The app addresses of one container, exactly as spec 4.3 says:
 * `<sandbox>-<subdomain>` with the label, else `<sandbox-short>-<project>-<container>-port<host_port>`
 * (without a compose project: `<sandbox-short>-<container>-port<host_port>`). Ports published on
 * 127.0.0.1 get none; a label that would not be one valid DNS label, or would read as an engine,
 * shell or TCP twin, gets none either.
 */
export function appEntries(sandbox: string, container: AppContainer): AppEntry[] {
  const project = container.labels[COMPOSE_PROJECT];
  const service = container.labels[COMPOSE_SERVICE];
  const subdomain = container.labels[SUBDOMAIN_LABEL];
  const tool = container.labels[TOOL_LABEL];
  const visibility = visibilityOf(container.labels[VISIBILITY_LABEL]);
  const ports = [...new Map(container.ports.filter(publishedOnAllInterfaces).map((p) => [p.hostPort, p])).values()]
    .sort((a, b) => a.containerPort - b.containerPort);
  return ports
    .map((p, i) => {
      // With a subdomain label, the first published port takes the chosen address; others keep the generated one.
      const label = subdomain && i === 0
        ? `${sandbox}-${dnsSafe(subdomain)}`
        : [shortName(sandbox), project && dnsSafe(project), dnsSafe(container.name), `port${p.hostPort}`].filter(Boolean).join('-');
      return { label, sandbox, container: container.name, project, service, containerPort: p.containerPort, hostPort: p.hostPort, ...(tool ? { tool } : {}), ...(visibility !== 'public' ? { visibility } : {}) };
    })
    .filter((e) => DNS_LABEL.test(e.label) && !RESERVED_SUFFIXES.some((s) => e.label.endsWith(s)));
}

/**
 * The sandbox names that could have built `label`, the one it belongs to first. Spec 4.3 builds
 * labels by prefixing a name, so names that prefix each other compete: `svc-shop` with the
 * subdomain `prod-web` and `svc-shop-prod` with `web` both build `svc-shop-prod-web`. The label
 * belongs to the most specific builder: the longest name part (`<sandbox>-` or, for generated
 * `…-port<N>` labels, `<short>-`), then the longest name. The owner is the first of these names
 * that exists (archived ones included); it does not depend on which came first.
 */
export function labelBuilders(label: string): string[] {
  const found: Array<{ name: string; part: number }> = [];
  const generated = GENERATED.test(label);
  for (let i = label.indexOf('-'); i > 0; i = label.indexOf('-', i + 1)) {
    const part = label.slice(0, i);
    if (isSandboxName(part)) found.push({ name: part, part: i });
    if (generated && isSandboxName(NAME_PREFIX + part)) found.push({ name: NAME_PREFIX + part, part: i });
  }
  return found.sort((a, b) => b.part - a.part || b.name.length - a.name.length).map((f) => f.name);
}
