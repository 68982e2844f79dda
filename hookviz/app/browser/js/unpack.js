// The wire format of hookviz/app/browser/wire.py, read back: one bytes payload per element (a JSON
// header and the binary values after it), and a heatmap's packed rows.

export function unpack(payload) {
  // wire.pack's payload: a 4-byte little-endian length, that much JSON, then the binary
  // values, each put back where the JSON says {"$blob": i} (as a copy: its own buffer, so a
  // Float32Array or Uint16Array can view it whatever its offset in the message).
  const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  const length = view.getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(payload.subarray(4, 4 + length)));
  const blobs = [];
  let at = 4 + length;
  for (const size of header.$blobs) {
    blobs.push(payload.slice(at, at + size));
    at += size;
  }
  delete header.$blobs;
  const fill = (value) => {
    if (Array.isArray(value)) return value.map(fill);
    if (value === null || typeof value !== "object") return value;
    const keys = Object.keys(value);
    if (keys.length === 1 && keys[0] === "$blob") return blobs[value.$blob];
    return Object.fromEntries(keys.map((key) => [key, fill(value[key])]));
  };
  return fill(header);
}

export async function unpackRows(packed, width) {
  // wire.packed_rows back: inflate (zlib), then add each row to the one below it, top to
  // bottom (a Uint8Array wraps mod 256, as NumPy's uint8 does).
  const stream = new Blob([packed]).stream().pipeThrough(new DecompressionStream("deflate"));
  const rows = new Uint8Array(await new Response(stream).arrayBuffer());
  for (let i = width; i < rows.length; i++) rows[i] += rows[i - width];
  return rows;
}
