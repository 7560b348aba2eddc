import { errors } from '../core/errors.ts';

export const NAME_PREFIX = 'svc-';
/** Short enough that `<name>-engine.<domain>` labels stay within DNS's 63 characters. */
const BODY = /^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$/;

/** `foo` becomes `svc-foo`; a name already carrying the prefix is kept. Throws on anything else. */
export function sandboxName(requested: string): string {
  const body = requested.startsWith(NAME_PREFIX) ? requested.slice(NAME_PREFIX.length) : requested;
  if (!BODY.test(body) || body.includes('--')) throw new errors.BadSandboxName(requested);
  return NAME_PREFIX + body;
}

/** True for a full sandbox name (`svc-` and a valid body), as sandboxName would give it. */
export function isSandboxName(name: string): boolean {
  return name.startsWith(NAME_PREFIX) && BODY.test(name.slice(NAME_PREFIX.length)) && !name.includes('--');
}

/** The short form used in generated app addresses (spec 4.3: `<sandbox-short>`). */
export function shortName(name: string): string {
  return name.startsWith(NAME_PREFIX) ? name.slice(NAME_PREFIX.length) : name;
}

/** Docker object names of one sandbox; everything the runtime creates is named from here. */
export function resourceNames(name: string) {
  return {
    container: name,
    network: name,
    volumes: {
      root: `${name}-root`,
      home: `${name}-home`,
      srv: `${name}-srv`,
      opt: `${name}-opt`,
      docker: `${name}-docker`,
    },
  } as const;
}
