import type { SandboxExecutor } from './runtime/sandbox-runtime.ts';

/**
 * Replaces root's authorized_keys in a running sandbox (the owner's registered keys, exactly).
 * Written through the runtime, so it works whatever the user did to the sandbox's sshd.
 */
export async function writeAuthorizedKeys(exec: SandboxExecutor, sandbox: string, keys: string): Promise<void> {
  const script = 'umask 077; mkdir -p /root/.ssh && cat > /root/.ssh/authorized_keys.svc-new && mv -f /root/.ssh/authorized_keys.svc-new /root/.ssh/authorized_keys';
  const { exitCode, stderr } = await exec.run(sandbox, ['sh', '-c', script], keys ? keys + '\n' : '');
  if (exitCode !== 0) throw new Error(`writing authorized_keys failed (exit ${exitCode}): ${stderr}`);
}

/** The TCP sockets of a process inside a sandbox, as its /proc shows them (which ports an app listens on). */
export async function procNetTcp(exec: SandboxExecutor, sandbox: string, pid: number): Promise<string> {
  const { stdout } = await exec.run(sandbox, ['cat', `/proc/${pid}/net/tcp`, `/proc/${pid}/net/tcp6`]);
  return stdout.toString('utf8');
}
