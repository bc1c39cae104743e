import { existsSync } from 'node:fs';

/** Debian's chromium, which `.ci/run` installs (browser tests never download one). */
export const CHROMIUM_PATH = '/usr/bin/chromium';

/**
 * Launch options for headless Debian chromium under playwright-core, with the flags this machine kind needs
 * (no sandbox as root, no GPU, no background network traffic). Throws, naming the fix, when chromium is missing,
 * so a browser test fails loudly instead of skipping.
 *
 * @example
 * ```ts
 * const browser = await chromium.launch(chromiumLaunchOptions());
 * ```
 */
export function chromiumLaunchOptions(): { executablePath: string; args: string[] } {
  if (!existsSync(CHROMIUM_PATH))
    throw new Error(`${CHROMIUM_PATH} is missing: install Debian's chromium (apt-get install -y chromium)`);
  return {
    executablePath: CHROMIUM_PATH,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  };
}
