/**
 * Watches the TLS records of an engine connection the edge passes through unopened, to tell when
 * the sandbox's dockerd has accepted the client (mutual TLS: only then may its bytes count as
 * activity — spec 3 rule 2 — or anyone could keep a sandbox awake with handshakes alone).
 *
 * - TLS 1.2: the server sends ChangeCipherSpec after the client's only once it verified the
 *   client's certificate and Finished.
 * - TLS 1.3 (everything after the hellos is encrypted): once the server's encrypted flight has
 *   begun and the client has answered with encrypted records (its certificate and Finished), the
 *   server sends either an alert (one short record, then it closes) or session tickets and data.
 *   A server record longer than any alert proves the client was accepted.
 * A resumed 1.2 session (the server's ChangeCipherSpec first) is proven the way 1.3 is.
 */
const CHANGE_CIPHER_SPEC = 20;
const APPLICATION_DATA = 23;
/** Longer than an encrypted alert (2 bytes, the inner content type and a 16-byte AEAD tag). */
const LONGER_THAN_ALERT = 32;

export class TlsProof {
  proven = false;
  /**
   * What the server sent before the record that proved the client (its hellos and handshake
   * flight): a client it refused gets about this much and an alert. The HAProxy data plane counts
   * engine bytes past it (edge/dataplane/activity-poll.ts).
   */
  flightBytes = 0;
  private clientChangedCipher = false;
  private serverEncrypting = false;
  private clientAnswered = false;
  private readonly client = new RecordReader((type) => this.fromClientRecord(type));
  private readonly server = new RecordReader((type, length) => this.fromServerRecord(type, length));

  /** `data` listeners for the client's and the server's side. */
  readonly fromClient = (chunk: Buffer): void => { if (!this.proven) this.client.read(chunk); };
  readonly fromServer = (chunk: Buffer): void => { if (!this.proven) this.server.read(chunk); };

  private fromClientRecord(type: number): void {
    if (type === CHANGE_CIPHER_SPEC) this.clientChangedCipher = true;
    if (type === APPLICATION_DATA && this.serverEncrypting) this.clientAnswered = true;
  }

  private fromServerRecord(type: number, length: number): void {
    if (type === CHANGE_CIPHER_SPEC && this.clientChangedCipher) this.proven = true;
    if (type === APPLICATION_DATA && this.clientAnswered && length > LONGER_THAN_ALERT) this.proven = true;
    if (!this.proven) this.flightBytes += 5 + length;
    if (type === CHANGE_CIPHER_SPEC || type === APPLICATION_DATA) this.serverEncrypting = true;
  }
}

/** Record headers (type, version, 16-bit length) of one direction, across chunks; payloads skipped. */
class RecordReader {
  private readonly head = Buffer.alloc(5);
  private fill = 0;
  private skip = 0;

  constructor(private readonly onRecord: (type: number, length: number) => void) {}

  read(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - at);
        this.skip -= n;
        at += n;
        continue;
      }
      const n = Math.min(5 - this.fill, chunk.length - at);
      chunk.copy(this.head, this.fill, at, at + n);
      this.fill += n;
      at += n;
      if (this.fill < 5) return;
      this.fill = 0;
      this.skip = this.head.readUInt16BE(3);
      this.onRecord(this.head[0]!, this.skip);
    }
  }
}
