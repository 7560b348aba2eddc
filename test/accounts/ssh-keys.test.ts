import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { addSshKey, createUser, listSshKeys, parseSshPublicKey, removeSshKey } from '../../accounts/index.ts';
import type { Store } from '../../store/index.ts';
import type { UserRecord } from '../../store/records.ts';
import { openTestStore, tempDir, type TestStore } from '../store/helpers.ts';

const badRequest = (pattern?: RegExp) => (e: unknown) => {
  const err = e as { code?: string; statusCode?: number; message: string };
  return err.code === 'SVC_BAD_REQUEST' && err.statusCode === 400 && (!pattern || pattern.test(err.message));
};

const tmp = tempDir('svc-ssh-');
let n = 0;

/** Real keys from OpenSSH's ssh-keygen (installed with openssh-client; the tests need it). */
function keygen(type: string, bits?: number, extra: string[] = []): { pub: string; priv: string } {
  const file = path.join(tmp.dir, `k${n++}`);
  try {
    execFileSync('ssh-keygen', ['-q', '-t', type, ...(bits ? ['-b', String(bits)] : []), '-N', '', '-C', 'me@laptop', '-f', file, ...extra], { stdio: 'pipe' });
  } catch (error) {
    throw new Error(`ssh-keygen is needed for these tests (apt-get install openssh-client): ${(error as Error).message}`);
  }
  return { pub: readFileSync(`${file}.pub`, 'utf8').trim(), priv: readFileSync(file, 'utf8') };
}

/** The fingerprint OpenSSH itself computes for a public key line. */
function opensshFingerprint(line: string): string {
  const file = path.join(tmp.dir, `fp${n++}.pub`);
  writeFileSync(file, `${line}\n`);
  return execFileSync('ssh-keygen', ['-l', '-E', 'sha256', '-f', file], { encoding: 'utf8' }).split(' ')[1]!;
}

function sshString(data: Buffer | string): Buffer {
  const body = Buffer.isBuffer(data) ? data : Buffer.from(data);
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  return Buffer.concat([len, body]);
}
function readStrings(blob: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < blob.length;) {
    const len = blob.readUInt32BE(i);
    out.push(blob.subarray(i + 4, i + 4 + len));
    i += 4 + len;
  }
  return out;
}
const blobOf = (line: string) => Buffer.from(line.split(' ')[1]!, 'base64');

describe('accounts: SSH keys', () => {
  let t: TestStore;
  let store: Store;
  let alice: UserRecord;
  before(async () => {
    t = await openTestStore('sqlite');
    store = t.store;
    alice = (await createUser(store, { name: 'alice' })).user;
  });
  after(async () => { await t?.cleanup(); tmp.remove(); });

  test('every known key type from ssh-keygen is accepted, with OpenSSH\'s fingerprint', () => {
    for (const [type, bits, expected] of [
      ['ed25519', undefined, 'ssh-ed25519'],
      ['rsa', 3072, 'ssh-rsa'],
      ['ecdsa', 256, 'ecdsa-sha2-nistp256'],
      ['ecdsa', 384, 'ecdsa-sha2-nistp384'],
      ['ecdsa', 521, 'ecdsa-sha2-nistp521'],
    ] as const) {
      const { pub } = keygen(type, bits);
      const parsed = parseSshPublicKey(`  ${pub}\n`);
      assert.equal(parsed.type, expected);
      assert.equal(parsed.line, pub);
      assert.equal(parsed.comment, 'me@laptop');
      assert.equal(parsed.fingerprint, opensshFingerprint(pub), `${type} ${bits ?? ''}`);
      assert.match(parsed.fingerprint, /^SHA256:[A-Za-z0-9+/]{43}$/);
    }
  });

  test('security keys (sk-ssh-ed25519, sk-ecdsa) are accepted', () => {
    const ed = readStrings(blobOf(keygen('ed25519').pub))[1]!;
    const skEd = Buffer.concat([sshString('sk-ssh-ed25519@openssh.com'), sshString(ed), sshString('ssh:')]);
    const edLine = `sk-ssh-ed25519@openssh.com ${skEd.toString('base64')} yubikey`;
    assert.equal(parseSshPublicKey(edLine).fingerprint, opensshFingerprint(edLine));

    const q = readStrings(blobOf(keygen('ecdsa', 256).pub))[2]!;
    const skEc = Buffer.concat([sshString('sk-ecdsa-sha2-nistp256@openssh.com'), sshString('nistp256'), sshString(q), sshString('ssh:')]);
    const ecLine = `sk-ecdsa-sha2-nistp256@openssh.com ${skEc.toString('base64')}`;
    const parsed = parseSshPublicKey(ecLine);
    assert.equal(parsed.fingerprint, opensshFingerprint(ecLine));
    assert.equal(parsed.comment, undefined);
  });

  test('private keys are refused, whatever their format', () => {
    const { priv } = keygen('ed25519');
    assert.throws(() => parseSshPublicKey(priv), badRequest(/private key/));
    assert.throws(() => parseSshPublicKey(keygen('rsa', 2048, ['-m', 'PEM']).priv), badRequest(/private key/));
    const body = priv.split('\n').filter((l) => l && !l.startsWith('-----')).join('');
    assert.throws(() => parseSshPublicKey(body), badRequest(/private key/));
  });

  test('garbage and almost-keys are refused with the reason', () => {
    const ed = keygen('ed25519').pub;
    const [type, data] = ed.split(' ') as [string, string];
    const cases: Array<[string, RegExp]> = [
      ['', /empty/],
      ['hello world', /unsupported key type/],
      ['ssh-dss AAAAB3NzaC1kc3MAAACBAP', /unsupported key type/],
      [`ssh-ed25519`, /missing/],
      [`ssh-ed25519 not*base64`, /base64/],
      [`ssh-ed25519 ${data.slice(0, -8)}`, /truncated|base64/],
      [`ssh-rsa ${data}`, /says "ssh-rsa"/],
      [`no-pty ${ed}`, /options/],
      [`command="echo hi" ${ed}`, /options/],
      [`${ed}\n${ed}`, /one public key line/],
      [`ssh-ed25519 ${Buffer.concat([blobOf(ed), Buffer.from([0])]).toString('base64')}`, /trailing/],
      [`ssh-ed25519-cert-v01@openssh.com ${data}`, /certificates/],
      [`---- BEGIN SSH2 PUBLIC KEY ----\nAAAA\n---- END SSH2 PUBLIC KEY ----`, /ssh-keygen -i/],
      [`-----BEGIN PUBLIC KEY-----\nMCow\n-----END PUBLIC KEY-----`, /PEM/],
      [`${type} ${data} bell\x07`, /control characters/],
    ];
    for (const [line, reason] of cases) assert.throws(() => parseSshPublicKey(line), badRequest(reason), JSON.stringify(line));
  });

  test('weak RSA and bad key material are refused', () => {
    assert.throws(() => parseSshPublicKey(keygen('rsa', 1024).pub), badRequest(/at least 2048/));
    const pub = keygen('ecdsa', 256).pub;
    const [t0, curve, q] = readStrings(blobOf(pub)) as [Buffer, Buffer, Buffer];
    const off = Buffer.from(q);
    off[off.length - 1] ^= 0x01; // no longer on the curve
    const blob = Buffer.concat([sshString(t0), sshString(curve), sshString(off)]);
    assert.throws(() => parseSshPublicKey(`ecdsa-sha2-nistp256 ${blob.toString('base64')}`), badRequest(/not a valid public key/));
    const wrongCurve = Buffer.concat([sshString(t0), sshString('nistp384'), sshString(q)]);
    assert.throws(() => parseSshPublicKey(`ecdsa-sha2-nistp256 ${wrongCurve.toString('base64')}`), badRequest(/curve/));
  });

  test('add, list, remove on the account; duplicates refused; concurrent adds all kept', async () => {
    const pub = keygen('ed25519').pub;
    const added = await addSshKey(store, alice.id, pub);
    assert.equal(added.key, pub);
    assert.equal(added.fingerprint, opensshFingerprint(pub));
    assert.deepEqual(await listSshKeys(store, alice.id), [added]);
    await assert.rejects(addSshKey(store, alice.id, `${pub.split(' ').slice(0, 2).join(' ')} other comment`), (e: { statusCode?: number }) => e.statusCode === 409);
    await assert.rejects(addSshKey(store, alice.id, 'junk'), badRequest());

    const more = Array.from({ length: 8 }, () => keygen('ed25519').pub);
    await Promise.all(more.map((k) => addSshKey(store, alice.id, k)));
    assert.equal((await listSshKeys(store, alice.id)).length, 9);

    const removed = await removeSshKey(store, alice.id, added.id);
    assert.equal(removed.id, added.id);
    const left = await listSshKeys(store, alice.id);
    assert.equal(left.length, 8);
    assert.ok(!left.some((k) => k.id === added.id));
    await assert.rejects(removeSshKey(store, alice.id, added.id), (e: { code?: string }) => e.code === 'SVC_NOT_FOUND');
    await assert.rejects(listSshKeys(store, 'ghost'), (e: { code?: string }) => e.code === 'SVC_NOT_FOUND');
    // the rest of the user record is untouched
    const user = await store.users.get(alice.id);
    assert.equal(user?.password_hash, alice.password_hash);
  });
});
