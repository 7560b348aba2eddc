export { SandboxCommands, DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, OUTPUT_LIMIT, type CommandInput, type CommandResult, type CommandEnd, type RunningCommand } from './sandbox-commands.ts';
export { SecretDelivery, deliveringSecrets, secretFiles, SECRETS_DIR } from './secret-delivery.ts';
export type { SessionSecrets } from './sandbox-commands.ts';
