import { Type, type Static } from '@sinclair/typebox';

const Duration = Type.String({
  minLength: 1,
  maxLength: 16,
  description: 'Duration: 30s, 45m, 2h, 14d; 0 or off for never (idle off is stored as 87600h).',
  examples: ['30m', '2h', 'off'],
});

const Status = Type.Union([Type.Literal('running'), Type.Literal('exited'), Type.Literal('deep_sleep'), Type.Literal('unavailable')], {
  description: 'running; exited (asleep: containers stopped, data intact); deep_sleep (container and network removed, data intact); '
    + 'unavailable (an extension for several hosts: the engine that holds the sandbox does not answer; nothing is lost, it shows its real status again once that engine answers, '
    + 'and actions on it answer 503 with Retry-After until then).',
});

const EngineAccess = Type.Object({
  host: Type.String({ description: 'Engine address: DOCKER_HOST=tcp://<host>:<port> with DOCKER_TLS_VERIFY=1.' }),
  port: Type.Integer(),
  docker_host: Type.String(),
  state: Type.Union([Type.Literal('ready'), Type.Literal('needs-certs')]),
});

const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);

const summaryFields = {
  name: Type.String(),
  status: Status,
  template: Type.String(),
  created_at: Type.String({ format: 'date-time' }),
  idle_timeout: Type.String(),
  deep_sleep_after: Type.String(),
  stops_at: Nullable(Type.String({ format: 'date-time', description: 'When a running sandbox will stop if idle.' })),
  deep_sleep_at: Nullable(Type.String({ format: 'date-time', description: 'When an asleep sandbox will be taken down.' })),
  engine_access: EngineAccess,
  hint: Type.Optional(Type.String()),
  tunnel_urls: Type.Array(Type.String()),
};

export const SandboxSummary = Type.Object(summaryFields, { $id: 'SandboxSummary' });

export const Sandbox = Type.Object(
  {
    ...summaryFields,
    owner: Type.String(),
    ca_cert: Type.Optional(Type.String({ description: 'Engine CA certificate (PEM), save as ca.pem unchanged.' })),
    client_cert: Type.Optional(Type.String({ description: 'Engine client certificate (PEM), save as cert.pem.' })),
    client_key: Type.Optional(Type.String({ description: 'Engine client key (PEM), save as key.pem; as secret as a token.' })),
    apps: Type.Array(Type.Object({
      url: Type.String(),
      answers: Type.Boolean(),
      visibility: Type.Optional(Type.Union([Type.Literal('authenticated'), Type.Literal('owner')], { description: 'Present for a private address (its tunnel.visibility label): who may reach it; absent means public.' })),
    })),
    extras: Type.Record(Type.String(), Type.String()),
  },
  { $id: 'Sandbox' },
);

export const CreateSandboxBody = Type.Object(
  {
    name: Type.Optional(Type.String({ maxLength: 64, description: '`foo` becomes `svc-foo`; generated when absent.' })),
    template: Type.Optional(Type.Union([Type.Literal('default'), Type.Literal('manager')])),
    idle_timeout: Type.Optional(Duration),
    deep_sleep_after: Type.Optional(Duration),
    memory_mb: Type.Optional(Type.Integer({ minimum: 64, description: "The sandbox's memory limit in MB: at most the owner's memory_mb quota (the default)." })),
    cpus: Type.Optional(Type.Number({ minimum: 0.1, description: "The sandbox's CPU limit: at most the owner's cpus quota (the default)." })),
  },
  { additionalProperties: false },
);
export type CreateSandboxBody = Static<typeof CreateSandboxBody>;

export const ForkSandboxBody = Type.Object(
  { name: Type.String({ maxLength: 64, description: "The fork's name: `foo` becomes `svc-foo`." }) },
  { additionalProperties: false },
);

export const PatchSandboxBody = Type.Object(
  { idle_timeout: Type.Optional(Duration), deep_sleep_after: Type.Optional(Duration) },
  { additionalProperties: false, minProperties: 1 },
);

export const ArchiveResult = Type.Object({
  name: Type.String(),
  archived: Type.Literal(true),
  archive: Type.String({ description: 'Where the archive lies, relative to the data folder.' }),
});
