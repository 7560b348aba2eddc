import net from 'node:net';

/** What the data plane (HAProxy, `send-proxy-v2`) tells of a connection it hands over. */
export interface ProxiedConnection {
  /** The client's address as HAProxy saw it; null for a LOCAL (health-check) connection. */
  clientAddress: string | null;
  clientPort: number | null;
  /** The TLS server name of the client's connection (`proxy-v2-options authority`), lowercase. */
  authority: string | null;
}

const SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
const HEADER_MAX = 16 + 1024;
const PP2_TYPE_AUTHORITY = 0x02;

/**
 * Parses a PROXY protocol v2 header (haproxy.org/download/2.6/doc/proxy-protocol.txt, section 2.2)
 * at the start of `buf`. `incomplete` until the whole header is there; `invalid` for anything else
 * than a v2 header (the socket only ever gets them from HAProxy).
 */
export function parseProxyV2(buf: Buffer): { status: 'ok'; header: ProxiedConnection; length: number } | { status: 'incomplete' } | { status: 'invalid' } {
  const seen = Math.min(buf.length, SIGNATURE.length);
  if (!buf.subarray(0, seen).equals(SIGNATURE.subarray(0, seen))) return { status: 'invalid' };
  if (buf.length < 16) return { status: 'incomplete' };
  const verCmd = buf[12];
  if (verCmd >> 4 !== 2) return { status: 'invalid' };
  const length = 16 + buf.readUInt16BE(14);
  if (length > HEADER_MAX) return { status: 'invalid' };
  if (buf.length < length) return { status: 'incomplete' };
  const header: ProxiedConnection = { clientAddress: null, clientPort: null, authority: null };
  const family = buf[13] >> 4;
  let tlvs = 16;
  if ((verCmd & 0x0f) === 1 && family === 1) {
    header.clientAddress = `${buf[16]}.${buf[17]}.${buf[18]}.${buf[19]}`;
    header.clientPort = buf.readUInt16BE(24);
    tlvs = 16 + 12;
  } else if ((verCmd & 0x0f) === 1 && family === 2) {
    const groups: string[] = [];
    for (let i = 0; i < 8; i++) groups.push(buf.readUInt16BE(16 + i * 2).toString(16));
    header.clientAddress = compressIpv6(groups);
    header.clientPort = buf.readUInt16BE(16 + 32 + 2);
    tlvs = 16 + 36;
  } else if ((verCmd & 0x0f) === 1) {
    tlvs = length; // AF_UNIX or unspecified: no address we could use, no TLVs read
  }
  for (let at = tlvs; at + 3 <= length; ) {
    const type = buf[at];
    const size = buf.readUInt16BE(at + 1);
    if (type === PP2_TYPE_AUTHORITY) header.authority = buf.subarray(at + 3, at + 3 + size).toString('latin1').toLowerCase();
    at += 3 + size;
  }
  return { status: 'ok', header, length };
}

/** RFC 5952 text of an IPv6 address (`::1`, `::ffff:7f00:1`), as Node reports remote addresses. */
function compressIpv6(groups: string[]): string {
  if (groups.slice(0, 5).every((g) => g === '0') && groups[5] === 'ffff') {
    const v4 = [groups[6], groups[7]].map((g) => parseInt(g, 16));
    return `::ffff:${v4[0] >> 8}.${v4[0] & 255}.${v4[1] >> 8}.${v4[1] & 255}`;
  }
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  if (best < 0) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

/**
 * Reads the PROXY v2 header off a connection from HAProxy, puts back what follows it and pauses
 * the socket. The client address becomes the socket's `remoteAddress`, so that everything after
 * (per-client limits, X-Forwarded-For, the API's view of the client) sees the client, not the
 * unix socket.
 */
export function readProxyHeader(socket: net.Socket, timeoutMs: number): Promise<ProxiedConnection> {
  return new Promise((resolve, reject) => {
    let buf: Buffer = Buffer.alloc(0);
    const finish = (err: Error | null, header?: ProxiedConnection, rest?: Buffer) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onGone);
      if (err) return reject(err);
      socket.pause();
      if (rest?.length) socket.unshift(rest);
      resolve(header!);
    };
    const onData = (chunk: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      const r = parseProxyV2(buf);
      if (r.status === 'invalid') return finish(new Error('not a PROXY v2 header'));
      if (r.status === 'incomplete') return;
      if (r.header.clientAddress) adoptClientAddress(socket, r.header.clientAddress, r.header.clientPort ?? 0);
      finish(null, r.header, buf.subarray(r.length));
    };
    const onGone = () => finish(new Error('closed before the PROXY header'));
    const timer = setTimeout(() => finish(new Error('no PROXY header in time')), timeoutMs);
    socket.on('data', onData);
    socket.once('close', onGone);
  });
}

/**
 * Makes `socket` report the client's address (net.Socket reads it from its handle, which for a
 * unix socket has none). TLS sockets built over it are given the same (tls-terminate.ts).
 */
export function adoptClientAddress(socket: net.Socket, address: string, port: number): void {
  Object.defineProperties(socket, {
    remoteAddress: { value: address, configurable: true },
    remotePort: { value: port, configurable: true },
    remoteFamily: { value: net.isIPv6(address) ? 'IPv6' : 'IPv4', configurable: true },
  });
}

/** The address a socket was given by adoptClientAddress, if any (own property, not the handle's). */
export function adoptedClientAddress(socket: net.Socket): { address: string; port: number } | null {
  const own = Object.getOwnPropertyDescriptor(socket, 'remoteAddress');
  return own ? { address: own.value as string, port: socket.remotePort ?? 0 } : null;
}
