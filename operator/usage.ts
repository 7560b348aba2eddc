/** `svc --help`: the operator's commands (a user's are the user CLI's, user-cli/). */
export const USAGE = `usage:
  svc user create NAME [--admin]      create a user; prints the new password (last line)
  svc user list [--json]              list users
  svc user passwd NAME                set a new generated password; prints it (last line)
  svc user set NAME [--max-sandboxes N] [--max-running N] [--memory-mb N] [--cpus N] [--wakes-per-hour N]
                    [--admin | --no-admin]
                                      set the user's quotas (N "default": back to the operator's default)
                                      and admin flag; prints the quotas in force
  svc user disable NAME               refuse the user's tokens and web sessions at once (their sandboxes
                                      cannot be woken; the service puts running ones to sleep)
  svc user enable NAME                let a disabled user in again
  svc audit [--user NAME] [--sandbox SANDBOX] [--action ACTION] [--since ISO] [--until ISO] [--limit N] [--json]
                                      the audit log, newest first (ACTION: sandbox.create, or a family: sandbox.)
  svc token create NAME [--sandbox SANDBOX] [--name LABEL]
                                      create a personal access token for user NAME; prints it (last line)
                                      --sandbox limits the token to one of the user's sandboxes
  svc token list NAME [--json]        list the user's tokens (never their values)
  svc token revoke TOKEN_ID           revoke a token
  svc export SANDBOX --user NAME [--out DIR]
                                      write the export folder svc-<sandbox>/ of NAME's sandbox into DIR (.):
                                      svc.env with a new token limited to the sandbox, docker/ certificates, README
  svc doctor                          check this host and the configuration, one line each with what to fix;
                                      exit code 0 only when everything needed is there
  svc backup FILE [--with-secret-key] write one backup file (0600) of the store while the service runs: records with
                                      their secrets still sealed, the CA, the registry token key, the audit log, the
                                      list of archives; the secret key file only with --with-secret-key
  svc restore FILE                    restore a backup into an empty store (SVC_STORE_URL, SVC_STORE_TABLE); says what
                                      else to copy (secret key, archives, registry blobs)
  svc hosts list [--json]             hosts with state, sandboxes, memory and CPU committed / total
  svc hosts drain NAME                on an Incus cluster: no new sandboxes on member NAME; undrain opens it again
  svc hosts evacuate NAME [--deadline D]
                                      on an Incus cluster: move every sandbox of the drained member NAME to the
                                      others, one after another (each asleep meanwhile; it wakes on its new member
                                      at its next request), then evacuate the member; prints each move
  svc hosts move SANDBOX [--to HOST] [--deadline D]
                                      on an Incus cluster: move one sandbox to member HOST (default: the member
                                      with the fewest); --deadline (30m, 2h; default SVC_MOVE_DEADLINE, 1h)
  svc hosts remove NAME               on an Incus cluster: take a drained member that holds no sandbox out
                                      (on one machine's Docker engine these say there is nowhere to go, and how
                                      to grow: docs/scale-out.md)

a user's commands (status, ls, create, start, keep-awake, logs, exec, cp, ssh, docker-context, up, urls)
  are the user CLI's, with SVC_URL/SVC_TOKEN/SVC_SANDBOX or svc.env: svc status --help (docs/user-tools.md)

environment: SVC_STORE_URL (postgres://… or sqlite:///…), else SVC_DATA_DIR (./data)/svc.sqlite;
             SVC_DOMAIN and SVC_HTTPS_PORT for the addresses in an export folder`;
