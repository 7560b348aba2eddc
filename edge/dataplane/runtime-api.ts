import net from 'node:net';

/** An answer of HAProxy's Runtime API that reports a failure (it answers in prose, not codes). */
export class RuntimeApiError extends Error {
  constructor(readonly command: string, readonly answer: string) {
    super(`haproxy runtime API: ${command.split('\n')[0].slice(0, 120)}: ${answer.trim().slice(0, 300)}`);
    this.name = 'RuntimeApiError';
  }
}

/** Answers that mean a command was refused (doc/management.txt 2.6 words them so). */
const FAILED = /^(Unknown command|Unknown map|Unknown table|Missing|Unable|Can't|Cannot|No such|Not found|Permission denied|error|.*\bnot found\b|.*\bfailed\b)/im;

/**
 * Arguments of a command are single words: a space, a newline or any control character would end a
 * word or the command itself, and what follows would be a command of its own (admin level). So would
 * `;` (several commands on one line), and `\` and `#` change how HAProxy's CLI reads a word.
 */
function oneWord(...args: string[]): void {
  for (const a of args) {
    if (!/^[\x21-\x7e]+$/.test(a) || /[;\\#]/.test(a)) throw new Error(`haproxy runtime API: refused an argument that is not one printable word: ${JSON.stringify(a.slice(0, 80))}`);
  }
}

/**
 * A client of HAProxy's Runtime API on its admin stats socket (doc/management.txt, section 9.3).
 * One connection per call: HAProxy answers and closes in non-interactive mode, which costs a
 * fraction of a millisecond on a unix socket and needs no reconnect logic.
 */
export class RuntimeApi {
  constructor(private readonly socketPath: string, private readonly timeoutMs = 5_000) {}

  /** Sends one command (or a payload command ending in `<<\n…\n`) and returns HAProxy's answer. */
  send(command: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(this.socketPath);
      const chunks: Buffer[] = [];
      socket.setTimeout(this.timeoutMs, () => socket.destroy(new Error(`haproxy runtime API: no answer in ${this.timeoutMs} ms`)));
      socket.on('data', (c: Buffer) => chunks.push(c));
      socket.once('error', reject);
      socket.once('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
      socket.end(command.endsWith('\n') ? command : `${command}\n`);
    });
  }

  /** Like send, but a refusal rejects with RuntimeApiError. */
  async run(command: string): Promise<string> {
    const answer = await this.send(command);
    if (FAILED.test(answer)) throw new RuntimeApiError(command, answer);
    return answer;
  }

  /** Sets a map entry, adding it if absent (`set map` alone fails on a missing key). */
  async putMapEntry(map: string, key: string, value: string): Promise<void> {
    oneWord(map, key, value);
    const answer = await this.send(`set map ${map} ${key} ${value}`);
    if (answer.trim() === '') return;
    await this.run(`add map ${map} ${key} ${value}`);
  }

  async deleteMapEntry(map: string, key: string): Promise<void> {
    oneWord(map, key);
    await this.send(`del map ${map} ${key}`); // "entry not found" is the state we want
  }

  /** Loads a certificate (PEM chain + key) under `name` and lists it for the TLS server name `sni`. */
  async addCertificate(name: string, pem: string, crtList: string, sni: string): Promise<void> {
    oneWord(name, crtList, sni);
    await this.run(`new ssl cert ${name}`);
    await this.replaceCertificate(name, pem);
    await this.run(`add ssl crt-list ${crtList} <<\n${name} ${sni}\n\n`);
  }

  /** Swaps the certificate loaded under `name` for a new PEM; connections already open keep the old one. */
  async replaceCertificate(name: string, pem: string): Promise<void> {
    oneWord(name);
    await this.run(`set ssl cert ${name} <<\n${pem.trim()}\n\n`); // a payload ends with an empty line
    await this.run(`commit ssl cert ${name}`);
  }

  /** Entries of a stick table: key → its counters (`show table <name>`). */
  async table(name: string): Promise<Map<string, Record<string, number>>> {
    return parseTable(await this.run(`show table ${name}`));
  }

  /** One entry of a stick table, or undefined when it has none for `key`. */
  async tableEntry(name: string, key: string): Promise<Record<string, number> | undefined> {
    oneWord(name, key);
    return parseTable(await this.run(`show table ${name} key ${key}`)).get(key);
  }

  /** Sets a counter of a stick table's entry (created if absent). */
  async setTableData(name: string, key: string, field: string, value: number): Promise<void> {
    oneWord(name, key, field);
    await this.run(`set table ${name} key ${key} data.${field} ${Math.trunc(value)}`);
  }
}

/** Rows of a `show table` answer: key → its counters. */
function parseTable(answer: string): Map<string, Record<string, number>> {
  const rows = new Map<string, Record<string, number>>();
  for (const line of answer.split('\n')) {
    const key = /\bkey=(\S+)/.exec(line);
    if (!key) continue;
    const counters: Record<string, number> = {};
    for (const m of line.matchAll(/\b([a-z_]+(?:\([0-9]+\))?)=(\d+)\b/g)) counters[m[1]] = Number(m[2]);
    rows.set(key[1], counters);
  }
  return rows;
}
