import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { halfSipHash8 } from './half-siphash.ts';

/** Marks a sealed value; anything else is a plain value from before sealing existed. */
const PREFIX = 'svc-sealed:v1:';
const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_HEX = /^[0-9a-f]{64}$/;

/**
 * Secrets at rest (engine keys in the store): AES-256-GCM under a key kept in a file outside the
 * store (`SVC_SECRET_KEY_FILE`), so a copy of the database alone (a dump, a backup, a stolen
 * SQLite file) yields no key. The key file is made on first use: 32 random bytes as hex, mode 0600,
 * in a folder created 0700.
 *
 * A sealed value is `svc-sealed:v1:<iv>.<ciphertext>.<tag>` (base64url). Each value is bound to
 * where it belongs (`context`, as additional data), so a sealed key moved to another record or field
 * does not open. Only full 16-byte tags are accepted: GCM would otherwise verify a shortened tag,
 * which makes forging far cheaper.
 */
export class SecretBox {
  private constructor(private readonly key: Buffer) {}

  /** Reads the key file, creating it (and its folder) if it does not exist. */
  static open(file: string): SecretBox {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    try {
      fs.writeFileSync(file, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw new Error(`cannot create the secret key file ${file} (SVC_SECRET_KEY_FILE): ${(err as Error).message}`);
    }
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8').trim();
    } catch (err) {
      throw new Error(`cannot read the secret key file ${file} (SVC_SECRET_KEY_FILE): ${(err as Error).message}`);
    }
    if (!KEY_HEX.test(text)) {
      throw new Error(`the secret key file ${file} (SVC_SECRET_KEY_FILE) does not hold 64 hex digits; restore it from a backup (the store's sealed secrets need it)`);
    }
    // The key must stay the service's alone, whatever mode an operator gave the file.
    if ((fs.statSync(file).mode & 0o077) !== 0) fs.chmodSync(file, 0o600);
    return new SecretBox(Buffer.from(text, 'hex'));
  }

  static isSealed(value: string): boolean {
    return value.startsWith(PREFIX);
  }

  /** Seals a plain value; a value sealed already is returned as it is. */
  seal(value: string, context: string): string {
    if (SecretBox.isSealed(value)) return value;
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(Buffer.from(context));
    const body = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()]);
    return `${PREFIX}${[iv, body, cipher.getAuthTag()].map((b) => b.toString('base64url')).join('.')}`;
  }

  /**
   * A keyed hash (HMAC-SHA256) for `purpose`, under a key derived from the service key (HKDF): finds
   * a value again (users' secrets in pushed images) without keeping it in clear, and a copy of the
   * database alone cannot test guesses against it.
   */
  keyedHash(purpose: string): (value: Buffer | string) => string {
    const key = Buffer.from(hkdfSync('sha256', this.key, Buffer.alloc(0), `svc-keyed-hash:${purpose}`, 32));
    return (value) => createHmac('sha256', key).update(value).digest('base64url');
  }

  /**
   * A keyed 32-bit fingerprint of 8 bytes (HalfSipHash-2-4 under a key derived from the service key),
   * cheap enough for every word of a layer: it picks the few places `keyedHash` then checks.
   */
  keyedFingerprint8(purpose: string): (bytes: Uint8Array, at: number) => number {
    const key = Buffer.from(hkdfSync('sha256', this.key, Buffer.alloc(0), `svc-keyed-fingerprint:${purpose}`, 8));
    const [k0, k1] = [key.readInt32LE(0), key.readInt32LE(4)];
    return (bytes, at) => halfSipHash8(k0, k1, bytes, at);
  }

  /** Opens a sealed value; a plain one (written before sealing) is returned as it is. */
  open(value: string, context: string): string {
    if (!SecretBox.isSealed(value)) return value;
    const parts = value.slice(PREFIX.length).split('.');
    const [iv, body, tag] = parts.map((p) => Buffer.from(p, 'base64url'));
    if (parts.length !== 3 || iv!.length !== IV_BYTES || tag!.length !== TAG_BYTES) {
      throw new Error(`the sealed secret for ${context} is malformed`);
    }
    const decipher = createDecipheriv('aes-256-gcm', this.key, iv!, { authTagLength: TAG_BYTES });
    decipher.setAAD(Buffer.from(context));
    decipher.setAuthTag(tag!);
    try {
      return Buffer.concat([decipher.update(body!), decipher.final()]).toString('utf8');
    } catch {
      throw new Error(`the sealed secret for ${context} does not open: SVC_SECRET_KEY_FILE is not the key it was sealed with, or the store was altered`);
    }
  }
}
