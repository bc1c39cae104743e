import { library } from '../../tsup.base';

export default [
  // Runs in browsers too: no Node built-ins, platform-neutral output. Core is imported for types only.
  library({ platform: 'neutral', target: 'es2022', clean: false }),
  // The `sluice-client` CLI (types from a live api-server's schemas): Node only, kept out of the library entry.
  library({ entry: ['src/bin.ts'], format: ['esm'], dts: false, clean: false }),
];
