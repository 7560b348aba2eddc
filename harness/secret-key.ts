import os from 'node:os';
import path from 'node:path';

/** The key that seals store secrets in tests and benchmarks (never the machine's /etc/svc/secret.key). */
export const TEST_SECRET_KEY_FILE = path.join(os.tmpdir(), 'svc-test', 'secret.key');
