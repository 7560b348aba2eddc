import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { answerOf, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);

/** Runs `command` as root in a sandbox over ssh; stdout and stderr as ssh printed them. */
export type SandboxSsh = (sandbox: string, command: string) => Promise<{ stdout: string; stderr: string }>;

/**
 * ssh into a user's sandboxes as the user does: a fresh ed25519 key (made in `dir`) registered with
 * POST /api/me/ssh-keys, then OpenSSH through the service's TLS port with `openssl s_client` as the
 * ProxyCommand, whose SNI (`<sandbox>-shell-tcp.<domain>`) names the sandbox's shell.
 */
export async function sshThroughEdge(t: TestService, token: string, dir: string): Promise<SandboxSsh> {
  const key = path.join(dir, 'id_ed25519');
  await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key]);
  const added = await t.api('POST', '/api/me/ssh-keys', token, { key: fs.readFileSync(`${key}.pub`, 'utf8').trim() });
  assert.equal(added.status, 201, answerOf(added));
  return (sandbox, command) => run('ssh', [
    '-i', key, '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'BatchMode=yes', '-o', 'LogLevel=ERROR',
    '-o', `ProxyCommand=openssl s_client -quiet -connect 127.0.0.1:${t.config.httpsPort} -servername %h`,
    `root@${sandbox}-shell-tcp.${t.config.domain}`, command,
  ], { timeout: 60_000 });
}
