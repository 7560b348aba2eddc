/**
 * One service process's hold on the public port's egress rule, for egress-port.test.ts. Args: port.
 * Opens the port, prints "open", and closes it when its stdin ends.
 */
import { logger } from '../../core/logger.ts';
import { installEgressRules, openPort } from '../../lifecycle/runtime/egress-firewall.ts';

await installEgressRules(logger.child({}, { level: 'silent' }));
const close = await openPort(Number(process.argv[2]));
process.stdout.write('open\n');
process.stdin.resume();
process.stdin.on('end', () => void close().then(() => process.exit(0)));
