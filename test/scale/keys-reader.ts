/**
 * One service process's view of the service keys, for service-keys.test.ts. Args: url table dataDir
 * [registryToken]. Prints one JSON line: the CA it would present, a registry token its front issued
 * (anonymous), and whether it accepts the given token (issued by another process).
 */
import { loadOrCreateServiceCa } from '../../edge/certs/service-ca.ts';
import { RegistryAuth } from '../../registry/index.ts';
import { openStore } from '../../store/index.ts';
import { TEST_SECRET_KEY_FILE } from '../store/helpers.ts';

const [url, table, dataDir, given] = process.argv.slice(2);
const store = await openStore(url!, { table: table!, secretKeyFile: TEST_SECRET_KEY_FILE });
try {
  const ca = await loadOrCreateServiceCa(dataDir!, 'localhost', store.serviceKeys);
  const auth = await RegistryAuth.open(store, dataDir!);
  const { token } = await auth.issue(undefined);
  const accepts = given ? await auth.principal(`Bearer ${given}`).then(() => true, () => false) : null;
  process.stdout.write(`${JSON.stringify({ caPem: ca.certPem, token, accepts })}\n`);
} finally {
  await store.close();
}
