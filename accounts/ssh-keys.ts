import { createHash, createPublicKey, randomUUID, type JsonWebKey } from 'node:crypto';
import { errors } from '../core/errors.ts';
import type { Store, SshKeyRecord } from '../store/index.ts';
import { updateUser } from './users.ts';

/**
 * SSH public keys on an account (design.md: `POST /api/me/ssh-keys {"key": "<authorized_keys line>"}`).
 * A key is one authorized_keys line without options: `<type> <base64 blob> [comment]`. The blob is
 * parsed (OpenSSH wire format) and the key material checked with node:crypto, so garbage, a
 * truncated paste or a key whose blob does not match its type is refused with errors.BadRequest.
 */

export const SSH_KEY_TYPES = [
  'ssh-ed25519',
  'ssh-rsa',
  'ecdsa-sha2-nistp256',
  'ecdsa-sha2-nistp384',
  'ecdsa-sha2-nistp521',
  'sk-ssh-ed25519@openssh.com',
  'sk-ecdsa-sha2-nistp256@openssh.com',
] as const;
export type SshKeyType = (typeof SSH_KEY_TYPES)[number];

const MAX_LINE = 16 * 1024;
const MAX_KEYS_PER_ACCOUNT = 100;
const MIN_RSA_BITS = 2048;

const CURVES: Record<string, { jwk: string; coordinate: number }> = {
  nistp256: { jwk: 'P-256', coordinate: 32 },
  nistp384: { jwk: 'P-384', coordinate: 48 },
  nistp521: { jwk: 'P-521', coordinate: 66 },
};

export interface ParsedSshKey {
  type: SshKeyType;
  /** The normalised line: `<type> <base64>[ <comment>]`. */
  line: string;
  /** OpenSSH style: `SHA256:<base64 without padding>`. */
  fingerprint: string;
  comment?: string;
  /** Key size in bits (RSA modulus, curve size; 256 for Ed25519). */
  bits: number;
}

function bad(message: string): never {
  throw new errors.BadRequest(message);
}

function isKnownType(t: string | undefined): t is SshKeyType {
  return t !== undefined && (SSH_KEY_TYPES as readonly string[]).includes(t);
}

/** Reads OpenSSH wire-format fields from a key blob. */
class Reader {
  private offset = 0;
  constructor(private readonly buf: Buffer) {}

  string(): Buffer {
    if (this.offset + 4 > this.buf.length) bad('the key data is truncated');
    const length = this.buf.readUInt32BE(this.offset);
    this.offset += 4;
    if (this.offset + length > this.buf.length) bad('the key data is truncated');
    const out = this.buf.subarray(this.offset, this.offset + length);
    this.offset += length;
    return out;
  }

  /** Unsigned big-endian magnitude of a positive mpint (leading zero byte removed). */
  mpint(): Buffer {
    const raw = this.string();
    if (raw.length === 0 || (raw[0]! & 0x80) !== 0) bad('the key data is malformed (bad integer)');
    return raw[0] === 0 ? raw.subarray(1) : raw;
  }

  end(): void {
    if (this.offset !== this.buf.length) bad('the key data has trailing bytes');
  }
}

function checkMaterial(jwk: JsonWebKey, what: string): void {
  try {
    createPublicKey({ key: jwk, format: 'jwk' });
  } catch {
    bad(`the ${what} key data is not a valid public key`);
  }
}

function bitLength(magnitude: Buffer): number {
  const lead = magnitude.findIndex((b) => b !== 0);
  if (lead < 0) return 0;
  return (magnitude.length - lead - 1) * 8 + (32 - Math.clz32(magnitude[lead]!));
}

function ecPoint(point: Buffer, curveName: string): { bits: number } {
  const curve = CURVES[curveName] ?? bad(`unsupported curve "${curveName}"`);
  if (point.length !== 1 + 2 * curve.coordinate || point[0] !== 0x04) bad('the ECDSA key data is malformed (bad point)');
  checkMaterial({
    kty: 'EC',
    crv: curve.jwk,
    x: point.subarray(1, 1 + curve.coordinate).toString('base64url'),
    y: point.subarray(1 + curve.coordinate).toString('base64url'),
  }, 'ECDSA');
  return { bits: curve.jwk === 'P-521' ? 521 : curve.coordinate * 8 };
}

/** Checks the blob's inner structure against the declared type; returns the key size. */
function checkBlob(type: SshKeyType, blob: Buffer): number {
  const r = new Reader(blob);
  const inner = r.string().toString('latin1');
  if (inner !== type) bad(`the key data is a "${inner.slice(0, 60)}" key but the line says "${type}"`);
  let bits: number;
  switch (type) {
    case 'ssh-ed25519':
    case 'sk-ssh-ed25519@openssh.com': {
      const pk = r.string();
      if (pk.length !== 32) bad('the Ed25519 key data is malformed (bad length)');
      checkMaterial({ kty: 'OKP', crv: 'Ed25519', x: pk.toString('base64url') }, 'Ed25519');
      bits = 256;
      break;
    }
    case 'ssh-rsa': {
      const e = r.mpint();
      const n = r.mpint();
      bits = bitLength(n);
      if (bits < MIN_RSA_BITS) bad(`the RSA key has ${bits} bits; at least ${MIN_RSA_BITS} are needed`);
      if (e.length === 0 || (e[e.length - 1]! & 1) === 0) bad('the RSA key data is malformed (bad exponent)');
      checkMaterial({ kty: 'RSA', n: n.toString('base64url'), e: e.toString('base64url') }, 'RSA');
      break;
    }
    case 'ecdsa-sha2-nistp256':
    case 'ecdsa-sha2-nistp384':
    case 'ecdsa-sha2-nistp521':
    case 'sk-ecdsa-sha2-nistp256@openssh.com': {
      const curveName = r.string().toString('latin1');
      const expected = type.startsWith('sk-') ? 'nistp256' : type.slice('ecdsa-sha2-'.length);
      if (curveName !== expected) bad(`the key data names curve "${curveName.slice(0, 20)}", expected "${expected}"`);
      bits = ecPoint(r.string(), curveName).bits;
      break;
    }
  }
  if (type.startsWith('sk-')) {
    const application = r.string();
    if (application.length === 0 || application.length > 256) bad('the security-key data is malformed (bad application)');
  }
  r.end();
  return bits;
}

export function sshFingerprint(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** Parses and validates one authorized_keys public key line; throws errors.BadRequest with the reason. */
export function parseSshPublicKey(input: string): ParsedSshKey {
  if (typeof input !== 'string') bad('the key must be a string: one line of an authorized_keys file');
  const text = input.trim();
  if (text === '') bad('the key is empty: paste one public key line (the contents of ~/.ssh/id_ed25519.pub)');
  if (text.length > MAX_LINE) bad('the key is too long for one public key line');
  if (/PRIVATE KEY|PuTTY-User-Key-File|b3BlbnNzaC1rZXktdjE/.test(text)) {
    bad('this is a private key: never share it. Paste the public key instead (the .pub file, e.g. ~/.ssh/id_ed25519.pub)');
  }
  if (text.startsWith('---- BEGIN SSH2 PUBLIC KEY')) {
    bad('this is an RFC 4716 (SSH2) public key: convert it to one authorized_keys line with `ssh-keygen -i -f key.pub`');
  }
  if (text.startsWith('-----BEGIN')) bad('this is a PEM block, not an authorized_keys line; give the OpenSSH public key (ssh-keygen -y -f key)');
  if (/[\r\n]/.test(text)) bad('give exactly one public key line (several lines were given)');
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x08\x0b-\x1f\x7f]/.test(text)) bad('the key contains control characters');

  const fields = text.split(/[ \t]+/);
  const [type, data, ...commentWords] = fields;
  if (!isKnownType(type)) {
    if (fields.slice(1).some(isKnownType)) bad('authorized_keys options before the key are not accepted: give just "<type> <key> [comment]"');
    if (type && type.includes('-cert-v01@openssh.com')) bad('SSH certificates are not accepted: give the plain public key');
    bad(`unsupported key type "${(type ?? '').slice(0, 40)}": use one of ${SSH_KEY_TYPES.join(', ')}`);
  }
  if (!data) bad(`the key data after "${type}" is missing`);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(data) || data.length % 4 !== 0) bad('the key data is not valid base64');
  const blob = Buffer.from(data, 'base64');
  if (blob.toString('base64') !== data) bad('the key data is not valid base64');
  const bits = checkBlob(type, blob);
  const comment = commentWords.join(' ');
  return {
    type,
    line: comment ? `${type} ${data} ${comment}` : `${type} ${data}`,
    fingerprint: sshFingerprint(blob),
    ...(comment ? { comment } : {}),
    bits,
  };
}

/** Adds a key to the user's account. errors.BadRequest for a bad key, errors.Conflict if already there. */
export async function addSshKey(store: Store, userId: string, key: string): Promise<SshKeyRecord> {
  const parsed = parseSshPublicKey(key);
  const record: SshKeyRecord = {
    id: randomUUID(),
    key: parsed.line,
    fingerprint: parsed.fingerprint,
    created_at: new Date().toISOString(),
  };
  await updateUser(store, userId, (user) => {
    const keys = user.ssh_keys ?? [];
    if (keys.some((k) => k.fingerprint === parsed.fingerprint)) {
      throw new errors.Conflict(`the key ${parsed.fingerprint} is already on this account`);
    }
    if (keys.length >= MAX_KEYS_PER_ACCOUNT) throw new errors.Conflict(`an account holds at most ${MAX_KEYS_PER_ACCOUNT} SSH keys; remove one first`);
    return { ...user, ssh_keys: [...keys, record] };
  });
  return record;
}

export async function listSshKeys(store: Store, userId: string): Promise<SshKeyRecord[]> {
  const user = await store.users.get(userId);
  if (!user) throw new errors.NotFound(`no user with id "${userId}"`);
  return user.ssh_keys ?? [];
}

/** Removes a key by its id; errors.NotFound if the account has no such key. */
export async function removeSshKey(store: Store, userId: string, keyId: string): Promise<SshKeyRecord> {
  let removed: SshKeyRecord | undefined;
  await updateUser(store, userId, (user) => {
    const keys = user.ssh_keys ?? [];
    removed = keys.find((k) => k.id === keyId);
    if (!removed) throw new errors.NotFound(`no SSH key with id "${keyId}" on this account`);
    return { ...user, ssh_keys: keys.filter((k) => k.id !== keyId) };
  });
  return removed!;
}

/** The authorized_keys file for a user's sandboxes: one line per key. */
export function authorizedKeys(keys: readonly SshKeyRecord[]): string {
  return keys.map((k) => `${k.key}\n`).join('');
}
