// Types of prepare-quickstart-data.mjs for the TypeScript that imports it (the console test).
export function cityLines(count?: number): string[];
export function prepareCities(): { path: string; written: boolean; records?: number };
