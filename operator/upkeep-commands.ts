import { redactUrl } from '../store/index.ts';
import { restoreBackup, writeBackup } from './backup.ts';
import { args, note, only, out, type Invocation } from './command-line.ts';
import { doctorChecks, runDoctor } from './doctor.ts';

/** `svc doctor`, `svc backup` and `svc restore`: the host and the store as a whole, without an open store. */

export async function doctorCommand({ command, rest, options, config }: Invocation): Promise<void> {
  only(options, [], command);
  args(rest, 0, '', command);
  if (!(await runDoctor(doctorChecks(config), out))) {
    note('svc doctor: something needed is missing (FAIL lines above)');
    process.exitCode = 1;
  }
}

export async function backupCommand({ command, rest, options, config }: Invocation): Promise<void> {
  only(options, ['with-secret-key'], command);
  const [file] = args(rest, 1, 'FILE', command);
  const done = await writeBackup(config, file!, { withSecretKey: options['with-secret-key'] === true });
  out(`wrote ${file}: ${done.records} records, ${done.audit} audit rows, ${done.archives} archives listed; ` +
    (done.withSecretKey ? 'WITH the secret key: keep the file as safe as the key itself' : `without the secret key: keep ${config.secretKeyFile} apart, a restore needs it`));
}

export async function restoreCommand({ command, rest, options, config }: Invocation): Promise<void> {
  only(options, [], command);
  const [file] = args(rest, 1, 'FILE', command);
  const done = await restoreBackup(config, file!);
  out(`restored ${done.records} records (${done.users} users, ${done.sandboxes} sandboxes) and ${done.audit} audit rows into ${redactUrl(config.storeUrl)}`);
  for (const line of done.missing) note(`missing: ${line}`);
}
