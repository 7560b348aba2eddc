/**
 * An edge with HAProxy as its data plane, in a process of its own for data-plane-run-folder.test.ts,
 * which kills it: prints HAProxy's run folder and pid, then waits.
 */
import path from 'node:path';
import { startTestEdge, TestBackend } from '../../harness/edge.ts';

const edge = await startTestEdge(new TestBackend(), { dataPlane: 'haproxy' });
const dp = edge.edge.dataPlane!;
process.stdout.write(`${JSON.stringify({ dir: path.dirname(dp.files.adminSocket), haproxy: dp.pid })}\n`);
setInterval(() => undefined, 60_000);
