/**
 * A second process writing to the store (as the CLI does while the service runs), for
 * cross-process.test.ts. Args: url table prefix count sandboxName startAtMs subject.
 * Creates `count` users `<prefix>-<i>` with two tokens each, then races for `sandboxName`, and
 * makes three simultaneous first single sign-ins for `subject` (user `<prefix>-sso`).
 * Prints one JSON line: { won: boolean, users: string[], subjectUsers: Array<{ id, created }> }.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { openStore } from '../../store/index.ts';
import { TEST_SECRET_KEY_FILE } from './helpers.ts';

const [url, table, prefix, countText, sandboxName, startAtText, subject] = process.argv.slice(2);
const store = await openStore(url!, { table: table!, secretKeyFile: TEST_SECRET_KEY_FILE });
const wait = Number(startAtText) - Date.now();
if (wait > 0) await new Promise((r) => setTimeout(r, wait));
const users: string[] = [];
let firstId = '';
const created = new Date().toISOString();
await Promise.all(Array.from({ length: Number(countText) }, async (_, i) => {
  const id = randomUUID();
  if (i === 0) firstId = id;
  const name = `${prefix}-${i}`;
  await store.users.put({ id, name, password_hash: 'scrypt$x$y', admin: false, created_at: created, ssh_keys: [] });
  for (let k = 0; k < 2; k++) {
    await store.tokens.put({ id: randomUUID(), user_id: id, hash: randomBytes(32).toString('hex'), created_at: created });
  }
  users.push(name);
}));
let won = false;
try {
  await store.sandboxes.insert({ name: sandboxName!, owner_id: firstId, template: 'default', idle_timeout: '30m', deep_sleep_after: '14d', created_at: created });
  won = true;
} catch (error) {
  if ((error as { code?: string }).code !== 'SVC_NAME_TAKEN') throw error;
}
const subjectUsers = (await Promise.all(Array.from({ length: 3 }, () => store.users.insertForSubject({
  id: randomUUID(), name: `${prefix}-sso`, password_hash: 'scrypt$x$y', admin: false, created_at: created, ssh_keys: [], oidc_subject: subject!,
})))).map((r) => ({ id: r.user.id, created: r.created }));
await store.close();
process.stdout.write(`${JSON.stringify({ won, users, subjectUsers })}\n`);
