/**
 * Header rules of the HTTP proxy (RFC 9110 7.6.1): hop-by-hop headers stay on their hop, the
 * X-Forwarded-* set is ours alone (a client's own copies are dropped, never trusted).
 */

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** Headers a client may not set for the app: we set them from what we saw. */
const OURS = new Set(['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-port', 'x-real-ip', 'forwarded']);

/** Names listed in a Connection header are hop-by-hop too. */
function connectionTokens(raw: string[]): Set<string> | null {
  let tokens: Set<string> | null = null;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].length === 10 && raw[i].toLowerCase() === 'connection') {
      for (const t of raw[i + 1].split(',')) {
        const name = t.trim().toLowerCase();
        if (name) (tokens ??= new Set()).add(name);
      }
    }
  }
  return tokens;
}

export interface ForwardedFor {
  clientIp: string;
  host: string;
  port: number;
}

/**
 * The request headers for the app, as a flat raw list (keeps order, case and repeated headers).
 * `keepUpgrade` keeps Connection/Upgrade for a websocket (or other upgrade) handshake.
 */
export function requestHeadersForApp(raw: string[], fwd: ForwardedFor, keepUpgrade = false): string[] {
  const listed = connectionTokens(raw);
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (OURS.has(name)) continue;
    if (keepUpgrade && (name === 'connection' || name === 'upgrade')) {
      out.push(raw[i], raw[i + 1]);
      continue;
    }
    if (HOP_BY_HOP.has(name) || listed?.has(name)) continue;
    if (name === 'expect') continue; // we already answered 100-continue ourselves
    out.push(raw[i], raw[i + 1]);
  }
  out.push(
    'x-forwarded-for', fwd.clientIp,
    'x-forwarded-proto', 'https',
    'x-forwarded-host', fwd.host,
    'x-forwarded-port', String(fwd.port),
    'x-real-ip', fwd.clientIp,
  );
  return out;
}

/** The response headers for the client: the app's (undici's parsed form: lowercase names, arrays for repeats), minus hop-by-hop ones. */
export function responseHeadersObject(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const conn = headers.connection;
  const listed = conn ? new Set((Array.isArray(conn) ? conn.join(',') : conn).split(',').map((t) => t.trim().toLowerCase())) : null;
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const v = headers[name];
    if (v === undefined || HOP_BY_HOP.has(name) || listed?.has(name)) continue;
    out[name] = v;
  }
  return out;
}

/** `::ffff:1.2.3.4` → `1.2.3.4`. */
export function plainIp(addr: string | undefined): string {
  if (!addr) return '';
  return addr.startsWith('::ffff:') && addr.includes('.') ? addr.slice(7) : addr;
}

/** Host header without its port, lowercased; IPv6 literals keep their brackets. */
export function hostWithoutPort(host: string | undefined): string {
  if (!host) return '';
  const h = host.trim().toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    return end < 0 ? h : h.slice(0, end + 1);
  }
  const colon = h.indexOf(':');
  const name = colon < 0 ? h : h.slice(0, colon);
  return name.endsWith('.') ? name.slice(0, -1) : name;
}
