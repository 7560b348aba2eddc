/**
 * `svc`: a user's command line for one sandbox, served by the service at /cli/svc.mjs (one file,
 * Node 18 or later, nothing to install). Reads SVC_URL, SVC_TOKEN and SVC_SANDBOX from the
 * environment or from svc.env in the current folder (or --env FILE), trusts the export folder's
 * service-ca.pem, never prints the token.
 */
import { fileURLToPath } from 'node:url';
import { runCli } from './run.ts';

process.exitCode = await runCli(process.argv.slice(2), fileURLToPath(import.meta.url));
