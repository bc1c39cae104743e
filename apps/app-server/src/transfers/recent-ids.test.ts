import { describe, expect, it } from 'vitest';
import { RecentIds } from './recent-ids.js';

describe('RecentIds', () => {
  it('forgets the least recently seen id beyond its capacity', () => {
    const seen = new RecentIds(2);
    seen.add('a');
    seen.add('b');
    seen.add('a'); // seen again: now the most recent
    seen.add('c');
    expect(['a', 'b', 'c'].filter((id) => seen.has(id))).toEqual(['a', 'c']);
  });
});
