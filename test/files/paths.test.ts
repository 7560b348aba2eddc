import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseSandboxPath } from '../../files/paths.ts';

const code = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return (err as { code: string }).code;
  }
  return 'no error';
};

describe('file path rules', () => {
  it('defaults to /root and takes relative paths from there', () => {
    assert.deepEqual(parseSandboxPath(undefined), { path: '/root', root: '/root', parts: [] });
    assert.deepEqual(parseSandboxPath(''), { path: '/root', root: '/root', parts: [] });
    assert.deepEqual(parseSandboxPath('notes/a.txt'), { path: '/root/notes/a.txt', root: '/root', parts: ['notes', 'a.txt'] });
  });

  it('accepts the four folders and volume _data paths, normalising . and //', () => {
    assert.equal(parseSandboxPath('/home/./u//x').path, '/home/u/x');
    assert.equal(parseSandboxPath('/srv').root, '/srv');
    assert.equal(parseSandboxPath('/opt/').path, '/opt');
    const v = parseSandboxPath('/var/lib/docker/volumes/demo_data/_data/db/x');
    assert.equal(v.root, '/var/lib/docker/volumes/demo_data/_data');
    assert.deepEqual(v.parts, ['db', 'x']);
  });

  it('refuses .. wherever it is, without resolving it', () => {
    for (const p of ['/root/../etc/passwd', '..', '/root/a/../../etc', 'a/..', '/var/lib/docker/volumes/v/_data/../../x']) {
      assert.equal(code(() => parseSandboxPath(p)), 'SVC_BAD_PATH', p);
    }
  });

  it('refuses paths outside the allowed folders', () => {
    for (const p of ['/', '/etc', '/etc/passwd', '//etc/passwd', '/rootx', '/roots/a', '/var/lib/docker', '/var/lib/docker/image/overlay2',
      '/var/lib/docker/volumes', '/var/lib/docker/volumes/v', '/var/lib/docker/volumes/v/other', '/var/lib/docker/volumes/metadata.db',
      '/var/lib/docker/volumes/-x/_data', '/proc/self/root', '/var/lib/docker/containers/x']) {
      assert.equal(code(() => parseSandboxPath(p)), 'SVC_PATH_NOT_ALLOWED', p);
    }
  });

  it('refuses newlines, NUL and other control characters', () => {
    for (const p of ['/root/a\nb', '/root/a\0b', '/root/a\rb', '/root/\tx', '/root/\u007f']) {
      assert.equal(code(() => parseSandboxPath(p)), 'SVC_BAD_PATH', JSON.stringify(p));
    }
  });

  it('refuses overlong paths', () => {
    assert.equal(code(() => parseSandboxPath('/root/' + 'a'.repeat(5000))), 'SVC_BAD_PATH');
  });
});
