/**
 * Who listens on a port inside an app container, read from its /proc/<pid>/net/tcp{,6}: tells an
 * app that listens only on 127.0.0.1 (unreachable through its published port, spec 4.3.3) from
 * one that is not up yet.
 */
export type ListenState = 'all-interfaces' | 'loopback-only' | 'none';

const LISTEN = '0A';

function isLoopback(hexAddress: string): boolean {
  if (hexAddress.length === 8) return hexAddress.endsWith('7F'); // 127.x.x.x, little-endian
  return hexAddress === '00000000000000000000000001000000' || /^0000000000000000FFFF00000[0-9A-F]{6}7F$/.test(hexAddress);
}

export function listenState(procNetTcp: string, port: number): ListenState {
  let loopback = false;
  for (const line of procNetTcp.split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 4 || fields[3] !== LISTEN) continue;
    const [address, hexPort] = fields[1]!.split(':');
    if (!address || parseInt(hexPort ?? '', 16) !== port) continue;
    if (!isLoopback(address)) return 'all-interfaces';
    loopback = true;
  }
  return loopback ? 'loopback-only' : 'none';
}
