// Filled in by the package issue; nothing is exported yet.
export {};
