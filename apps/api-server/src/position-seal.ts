/**
 * Sealing the positions handed to a row-filtered reader. A query's `next` cursor and a change feed's event ids are
 * base64url JSON that anyone can read, and each holds what a row filter hides: a cursor whose scan stopped at
 * `cache.scanCap` points at the last record *examined*, which may be hidden (its sort values and key are in the
 * cursor), and a feed id carries the change-log sequence, which counts every change — hidden records' too. Sealed
 * (AES-256-GCM, keys derived from `api.auth.jwtSecret`), a position tells its holder nothing and cannot be made by
 * hand; every api-server sharing the secret opens the others' positions. Row filters exist only with auth, so
 * there is always a secret to derive from.
 */
import { createCipheriv, createDecipheriv, createHmac, hkdfSync } from 'node:crypto';

/** What a sealed text is: bound into the seal, so one kind of position is never taken for another. */
export const SealPurpose = { cursor: 'cursor', feedToken: 'feed-token' } as const;
export type SealPurpose = (typeof SealPurpose)[keyof typeof SealPurpose];

const IV_BYTES = 12;
const TAG_BYTES = 16;
const BASE64URL = /^[A-Za-z0-9_-]+$/;

/**
 * Seals and opens positions with keys derived from one secret.
 *
 * The IV is synthetic (an HMAC of the purpose and the text, under a key of its own): the same position seals to the
 * same bytes — what the fast routes' answers must equal to fastify's, byte for byte — and two different positions
 * never share an IV, which is what AES-GCM needs. Equal sealed texts only say that the positions are equal.
 *
 * @example
 * ```ts
 * const seal = new PositionSeal(config.api.auth.jwtSecret);
 * const sealed = seal.seal(SealPurpose.cursor, inner);
 * seal.open(SealPurpose.cursor, sealed); // inner; null for anything this secret did not seal as a cursor
 * ```
 */
export class PositionSeal {
  private readonly encryptionKey: Buffer;
  private readonly ivKey: Buffer;

  constructor(secret: string) {
    const derive = (info: string) =>
      Buffer.from(hkdfSync('sha256', secret, 'sluice api-server positions', info, 32));
    this.encryptionKey = derive('aes-256-gcm key');
    this.ivKey = derive('synthetic iv key');
  }

  /** `text` sealed for `purpose`, as base64url. */
  seal(purpose: SealPurpose, text: string): string {
    const plain = Buffer.from(text, 'utf8');
    const iv = createHmac('sha256', this.ivKey)
      .update(purpose)
      .update('\0')
      .update(plain)
      .digest()
      .subarray(0, IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.encryptionKey, iv);
    cipher.setAAD(Buffer.from(purpose, 'utf8'));
    const body = Buffer.concat([cipher.update(plain), cipher.final()]);
    return Buffer.concat([iv, body, cipher.getAuthTag()]).toString('base64url');
  }

  /** The text `sealed` holds, or null when it is not a `purpose` sealed with this secret (altered, made up). */
  open(purpose: SealPurpose, sealed: string): string | null {
    if (!BASE64URL.test(sealed)) return null;
    const bytes = Buffer.from(sealed, 'base64url');
    if (bytes.length < IV_BYTES + TAG_BYTES) return null;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.encryptionKey, bytes.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(purpose, 'utf8'));
      decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
      const plain = Buffer.concat([
        decipher.update(bytes.subarray(IV_BYTES, bytes.length - TAG_BYTES)),
        decipher.final(),
      ]);
      return plain.toString('utf8');
    } catch {
      return null;
    }
  }
}
