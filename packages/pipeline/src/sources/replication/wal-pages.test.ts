import { describe, expect, it } from 'vitest';
import { pastPageHeader } from './wal-pages.js';

const DEFAULT = { blockSize: 8192, segmentSize: 16 * 1024 * 1024 };

describe('positions on WAL page boundaries', () => {
  it('moves a page boundary past its header: 24 bytes, 40 at a segment start', () => {
    expect(pastPageHeader('0/19A4000', DEFAULT)).toBe('0/19A4018');
    expect(pastPageHeader('0/2000000', DEFAULT)).toBe('0/2000028');
    expect(pastPageHeader('1/0', DEFAULT)).toBe('1/28');
  });

  it('leaves every other position as it is, in PostgreSQL spelling', () => {
    expect(pastPageHeader('0/19A4001', DEFAULT)).toBe('0/19A4001');
    expect(pastPageHeader('0/19a3ff8', DEFAULT)).toBe('0/19A3FF8');
    expect(pastPageHeader('0/0', DEFAULT)).toBe('0/0');
  });

  it('follows the server layout (another block and segment size)', () => {
    const big = { blockSize: 32768, segmentSize: 1024 * 1024 };
    expect(pastPageHeader('0/19A4000', big)).toBe('0/19A4000');
    expect(pastPageHeader('0/19A8000', big)).toBe('0/19A8018');
    expect(pastPageHeader('0/1900000', big)).toBe('0/1900028');
  });
});
