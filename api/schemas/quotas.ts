import { Type } from '@sinclair/typebox';

/** A user's quotas (accounts/quotas.ts): their own values over the operator's defaults. */
export const Quotas = Type.Object({
  max_sandboxes: Type.Integer({ description: 'Sandboxes in all (archived ones not counted).' }),
  max_running: Type.Integer({ description: 'Sandboxes running (or starting) at once.' }),
  memory_mb: Type.Integer({ description: 'Memory limit of one sandbox, MB: the default and the most a create may ask for.' }),
  cpus: Type.Number({ description: 'CPU limit of one sandbox: the default and the most a create may ask for.' }),
  wakes_per_hour: Type.Integer({ description: 'Wakes by app traffic per clock hour.' }),
});

export const QuotaUsage = Type.Object({
  sandboxes: Type.Integer(),
  running: Type.Integer(),
  wakes_this_hour: Type.Integer(),
});
