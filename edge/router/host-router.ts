/**
 * Host name → route kind. Pure: the edge decides what to do with a connection from the SNI alone,
 * before any TLS is spoken (design.md, "The parts": the edge's table).
 *
 * Reserved label suffixes, checked in this order: `-engine`, `-shell-tcp`, `-tcp`. An app label
 * must not end with one of them (the lifecycle core refuses such subdomains), otherwise its
 * address would be read as the engine, shell or TCP twin of another label.
 */

export type Route =
  /** `<domain>`, or no SNI at all (clients connecting by IP address): the service API. */
  | { kind: 'api' }
  /** `registry.<domain>`: the registry front. */
  | { kind: 'registry' }
  /** `<sandbox>-engine.<domain>`: raw TLS passthrough to the sandbox's dockerd (2376). */
  | { kind: 'engine'; sandbox: string }
  /** `<sandbox>-shell-tcp.<domain>`: TLS ends here, raw TCP to the sandbox's sshd (22). */
  | { kind: 'shell'; sandbox: string }
  /** `<label>-tcp.<domain>`: TLS ends here, raw TCP to the app of `<label>`. */
  | { kind: 'app-tcp'; label: string }
  /** `<label>.<domain>`: TLS ends here, HTTP reverse proxy to the app of `<label>`. */
  | { kind: 'app-http'; label: string }
  /** Anything else: a 404 page, never another sandbox. */
  | { kind: 'unknown' };

const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** True for one DNS label of lowercase letters, digits and inner dashes (RFC 1123). */
export function isLabel(s: string): boolean {
  return LABEL.test(s);
}

function strip(label: string, suffix: string): string | null {
  if (!label.endsWith(suffix)) return null;
  const base = label.slice(0, -suffix.length);
  return isLabel(base) ? base : null;
}

/**
 * Classifies a server name. `serverName` is lowercase without a trailing dot (as the SNI peek
 * gives it); `domain` is the service domain.
 */
export function routeFor(serverName: string | null, domain: string): Route {
  if (serverName === null) return { kind: 'api' };
  const d = domain.toLowerCase();
  if (serverName === d) return { kind: 'api' };
  if (serverName === `registry.${d}`) return { kind: 'registry' };
  const suffix = `.${d}`;
  if (!serverName.endsWith(suffix)) return { kind: 'unknown' };
  const label = serverName.slice(0, -suffix.length);
  if (!isLabel(label)) return { kind: 'unknown' }; // also rejects a.b.<domain>

  let base: string | null;
  if ((base = strip(label, '-engine'))) return { kind: 'engine', sandbox: base };
  if ((base = strip(label, '-shell-tcp'))) return { kind: 'shell', sandbox: base };
  if ((base = strip(label, '-tcp'))) return { kind: 'app-tcp', label: base };
  return { kind: 'app-http', label };
}
