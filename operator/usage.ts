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
  svc hosts add NAME ADDRESS --pool CIDR [--port N] [--csr FILE] [--certs-out DIR] [--same-machine] [--networks N]
                                      register a runner host (scripts/runner.sh prints this line): the service CA signs
                                      its engine certificate (for the request in FILE, or a new key) and the service's
                                      client certificate; ca.pem and cert.pem (key.pem) go to DIR (default ./NAME-certs);
                                      --pool: its sandbox addresses (none of this machine's sandboxes reaches them);
                                      --networks: sandbox networks its pool holds (what its engine reports);
                                      --dns: its nameservers, for its sandboxes' inner containers (else SVC_SANDBOX_DNS)
  svc hosts list [--json]             hosts with state, sandboxes, memory and CPU committed / total
  svc hosts drain NAME                no new sandboxes on NAME ("local": this machine); undrain opens it again
  svc hosts evacuate NAME [--deadline D]
                                      move every sandbox of the drained host NAME to the hosts placement chooses
                                      (volumes copied and checked, the sandbox down meanwhile; it wakes on its new
                                      host at its next request); prints each move's progress; one that fails is
                                      rolled back and named at the end, the others move
  svc hosts move SANDBOX [--to HOST] [--deadline D]
                                      move one sandbox to HOST (default: the host placement chooses), as evacuate
                                      does; --deadline (30m, 2h; default SVC_MOVE_DEADLINE, 1h): a move not done
                                      by then is rolled back
  svc hosts remove NAME               forget a drained host; refused while it holds sandboxes (docs/scale-out.md)

a user's commands (status, ls, create, start, keep-awake, logs, exec, cp, ssh, docker-context, up, urls)
  are the user CLI's, with SVC_URL/SVC_TOKEN/SVC_SANDBOX or svc.env: svc status --help (docs/user-tools.md)

environment: SVC_STORE_URL (postgres://… or sqlite:///…), else SVC_DATA_DIR (./data)/svc.sqlite;
             SVC_DOMAIN and SVC_HTTPS_PORT for the addresses in an export folder`;
