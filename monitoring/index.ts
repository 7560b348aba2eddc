/**
 * The service's own monitoring: the prom-client implementation of the metrics port (core/metrics.ts),
 * readiness checks (GET /readyz) and the store's error count. Wired by service.ts; served by
 * api/routes/ops.ts.
 */
export { PromMetrics, ruleFamily } from './prom-metrics.ts';
export { readiness, serviceChecks, CHECK_TIMEOUT_MS, type Readiness, type ReadinessCheck, type ServiceParts } from './health.ts';
export { countingStoreErrors } from './store-errors.ts';
