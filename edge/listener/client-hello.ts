/**
 * A TLS ClientHello reader that never terminates TLS: it finds the server name (SNI) and the
 * ALPN list in the first bytes a client sends, so the edge can choose between passthrough and
 * termination before any TLS state exists (Traefik's clientHelloInfo, done by hand).
 *
 * RFC 8446 4.1.2 / RFC 5246 7.4.1.2; SNI is RFC 6066 section 3, ALPN RFC 7301.
 */

export type ClientHelloResult =
  | { status: 'incomplete' }
  | { status: 'not-tls'; reason: string }
  | { status: 'ok'; serverName: string | null; alpn: string[] };

const RECORD_HANDSHAKE = 0x16;
const HANDSHAKE_CLIENT_HELLO = 0x01;
const RECORD_HEADER = 5;
/** RFC 8446 5.1: a record carries at most 2^14 bytes, 2^14 + 256 when protected. */
const MAX_RECORD = 16384 + 2048;
/** No real ClientHello (even with post-quantum key shares) comes close. */
export const MAX_CLIENT_HELLO = 64 * 1024;

/**
 * Parses the ClientHello at the start of `buf`, which may be cut anywhere.
 * `incomplete` means: read more bytes and call again with everything received so far.
 */
export function parseClientHello(buf: Buffer): ClientHelloResult {
  if (buf.length === 0) return { status: 'incomplete' };
  if (buf[0] !== RECORD_HANDSHAKE) return { status: 'not-tls', reason: `first byte 0x${buf[0].toString(16)} is not a TLS handshake` };

  // Gather the handshake bytes, which may span several records.
  const parts: Buffer[] = [];
  let have = 0;
  let need = -1; // full handshake message length once known
  let off = 0;
  while (off < buf.length) {
    if (buf.length - off < RECORD_HEADER) break;
    if (buf[off] !== RECORD_HANDSHAKE) return { status: 'not-tls', reason: 'ClientHello interrupted by a non-handshake record' };
    if (buf[off + 1] !== 0x03) return { status: 'not-tls', reason: 'unknown record version' };
    const len = buf.readUInt16BE(off + 3);
    if (len === 0 || len > MAX_RECORD) return { status: 'not-tls', reason: 'bad record length' };
    const body = buf.subarray(off + RECORD_HEADER, Math.min(buf.length, off + RECORD_HEADER + len));
    parts.push(body);
    have += body.length;
    if (need < 0 && have >= 4) {
      const hs = parts.length === 1 ? parts[0] : Buffer.concat(parts);
      if (hs[0] !== HANDSHAKE_CLIENT_HELLO) return { status: 'not-tls', reason: 'first handshake message is not a ClientHello' };
      need = 4 + hs.readUIntBE(1, 3);
      if (need > MAX_CLIENT_HELLO) return { status: 'not-tls', reason: 'ClientHello too large' };
    }
    if (need >= 0 && have >= need) {
      return parseHelloBody(Buffer.concat(parts).subarray(4, need));
    }
    if (body.length < len) break; // record cut short: wait for more bytes
    off += RECORD_HEADER + len;
  }
  if (buf.length > MAX_CLIENT_HELLO) return { status: 'not-tls', reason: 'ClientHello too large' };
  return { status: 'incomplete' };
}

function parseHelloBody(b: Buffer): ClientHelloResult {
  const bad = (reason: string): ClientHelloResult => ({ status: 'not-tls', reason });
  let p = 0;
  const need = (n: number) => p + n <= b.length;
  if (!need(2 + 32)) return bad('short ClientHello');
  p += 2 + 32; // legacy_version, random
  if (!need(1)) return bad('short ClientHello');
  p += 1 + b[p]; // session id
  if (!need(2)) return bad('short ClientHello');
  p += 2 + b.readUInt16BE(p); // cipher suites
  if (!need(1)) return bad('short ClientHello');
  p += 1 + b[p]; // compression methods
  let serverName: string | null = null;
  const alpn: string[] = [];
  if (p === b.length) return { status: 'ok', serverName, alpn }; // no extensions at all
  if (!need(2)) return bad('short ClientHello');
  const extEnd = p + 2 + b.readUInt16BE(p);
  p += 2;
  if (extEnd > b.length) return bad('extensions overrun the ClientHello');
  while (p + 4 <= extEnd) {
    const type = b.readUInt16BE(p);
    const len = b.readUInt16BE(p + 2);
    const start = p + 4;
    const end = start + len;
    if (end > extEnd) return bad('extension overruns the ClientHello');
    if (type === 0x0000 && len >= 2) {
      // server_name: list of (type, name); only host_name (0) is defined
      let q = start + 2;
      const listEnd = Math.min(end, q + b.readUInt16BE(start));
      while (q + 3 <= listEnd) {
        const nameType = b[q];
        const nameLen = b.readUInt16BE(q + 1);
        if (q + 3 + nameLen > listEnd) return bad('server name overruns its extension');
        if (nameType === 0 && serverName === null) serverName = b.toString('latin1', q + 3, q + 3 + nameLen);
        q += 3 + nameLen;
      }
    } else if (type === 0x0010 && len >= 2) {
      let q = start + 2;
      const listEnd = Math.min(end, q + b.readUInt16BE(start));
      while (q + 1 <= listEnd) {
        const l = b[q];
        if (q + 1 + l > listEnd) break;
        alpn.push(b.toString('latin1', q + 1, q + 1 + l));
        q += 1 + l;
      }
    }
    p = end;
  }
  return { status: 'ok', serverName, alpn };
}
