/**
 * Parses one CSV record (RFC 4180: `,` separated, `"` quoted, `""` an escaped quote). Returns `null` when a
 * quoted field is still open at the end of the text (the record continues on the next line).
 */
export function parseCsvRecord(text: string): string[] | null {
  const cells: string[] = [];
  let i = 0;
  const n = text.length;
  for (;;) {
    if (i < n && text.charCodeAt(i) === 34) {
      // Quoted cell.
      let value = '';
      i++;
      for (;;) {
        const q = text.indexOf('"', i);
        if (q < 0) return null;
        value += text.slice(i, q);
        if (text.charCodeAt(q + 1) === 34) {
          value += '"';
          i = q + 2;
          continue;
        }
        i = q + 1;
        break;
      }
      // Anything between the closing quote and the next comma is kept verbatim (lenient).
      const comma = text.indexOf(',', i);
      if (comma < 0) {
        cells.push(value + text.slice(i));
        return cells;
      }
      cells.push(value + text.slice(i, comma));
      i = comma + 1;
    } else {
      const comma = text.indexOf(',', i);
      if (comma < 0) {
        cells.push(text.slice(i));
        return cells;
      }
      cells.push(text.slice(i, comma));
      i = comma + 1;
    }
  }
}

/** Formats cells as one CSV record. */
export function formatCsvRecord(cells: readonly unknown[]): string {
  return cells
    .map((cell) => {
      if (cell === null || cell === undefined) return '';
      const text = typeof cell === 'object' ? JSON.stringify(cell) : String(cell);
      return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
    })
    .join(',');
}
