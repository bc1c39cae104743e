#!/usr/bin/env node
// The CLI entry is added with the app issue.
export {};
