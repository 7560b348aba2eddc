export { createRedis } from './connection.ts';
export { LifecycleQueue, LIFECYCLE_QUEUE, RECONCILE_EVERY_MS, type LifecycleJob } from './lifecycle-queue.ts';
export { ScanQueue, SCAN_QUEUE, scanJobId, type ScanJob } from './scan-queue.ts';
