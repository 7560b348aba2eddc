/**
 * HalfSipHash-2-4 (Aumasson and Bernstein's SipHash on 32-bit words: a keyed pseudo-random function
 * with a 64-bit key and a 32-bit answer) of the 8 bytes of `bytes` at `at`. A keyed fingerprint cheap
 * enough to compute at every word of a pushed layer (tens of nanoseconds): the search for users'
 * secrets (scanner/owner-secrets.ts) hashes with HMAC-SHA256 only where it matches.
 */
export function halfSipHash8(k0: number, k1: number, bytes: Uint8Array, at: number): number {
  let v0 = k0 | 0;
  let v1 = k1 | 0;
  let v2 = (0x6c796765 ^ k0) | 0;
  let v3 = (0x74656462 ^ k1) | 0;
  // the rounds written out (SipRound on 32-bit words): this runs at every word of a layer
  for (let r = 0; r < 8; r++) {
    let m = 0;
    if (r === 0 || r === 2) {
      const i = at + r * 2;
      m = bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24);
      v3 ^= m;
    } else if (r === 4) {
      m = 8 << 24;
      v3 ^= m;
    } else if (r === 6) {
      v2 ^= 0xff;
    }
    const rounds = r === 6 ? 4 : 2;
    for (let j = 0; j < rounds; j++) {
      v0 = (v0 + v1) | 0; v1 = (v1 << 5) | (v1 >>> 27); v1 ^= v0; v0 = (v0 << 16) | (v0 >>> 16);
      v2 = (v2 + v3) | 0; v3 = (v3 << 8) | (v3 >>> 24); v3 ^= v2;
      v0 = (v0 + v3) | 0; v3 = (v3 << 7) | (v3 >>> 25); v3 ^= v0;
      v2 = (v2 + v1) | 0; v1 = (v1 << 13) | (v1 >>> 19); v1 ^= v2; v2 = (v2 << 16) | (v2 >>> 16);
    }
    if (r === 0 || r === 2 || r === 4) v0 ^= m;
    if (r === 6) break;
    r++;
  }
  return (v1 ^ v3) >>> 0;
}
