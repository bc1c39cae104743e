// The quick start's HTTP reads of its own servers: a 5 s timeout each, a non-2xx answer is an error.

export async function getJson(url, init) {
  const response = await fetch(url, { ...init, signal: AbortSignal.timeout(5_000) });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

export async function getText(url) {
  const response = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.text();
}

export const sleep = (ms) => new Promise((resolveSleep) => setTimeout(resolveSleep, ms));
