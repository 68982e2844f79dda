// The state every picture on the page shares, in one place: what was sent (the images, the
// heatmaps' indices and grids' series by picture id, the records of pictures to show again),
// what is mounted now, and the user's last class choice. Each Map keeps its latest uses and
// drops the least recently used first.
import { unpackRows } from "./unpack.js";

// the current pictures and a few layers' before them (an overlay and a grid a layer, and the
// top-5 classes' heatmaps sent ahead for each)
const KEPT = 30;

export const store = {
  bases: new Map(), // image digest -> an entry of its display-size pixels
  heats: new Map(), // picture id -> an entry of its colormap indices, or a grid's series
  // role|context|layer label -> the record of a picture sent before (its data, without
  // pixels: layer_swap.js)
  records: new Map(),
  // role -> the data of the picture of that role now mounted (what a swap must cover)
  mounted: new Map(),
  // context (forward pass and method) -> the top-5 radio's option -> its class's record (its
  // overlay texts and picture id: class_follow.js)
  classSets: new Map(),
  // the top-5 radio's option the user last picked in this page ({ radio, option }), or null
  classChoice: null,
};

export function keep(cache, key, value, most = KEPT) {
  // the latest use last: the least recently used goes first
  cache.delete(key);
  cache.set(key, value);
  while (cache.size > most) cache.delete(cache.keys().next().value);
  return value;
}

export function entryIn(cache, key) {
  // An entry: `pixels` once known, and a promise of them. A picture may need what another
  // element sends (the overlay the image; the raw heatmap the overlay's indices) before that
  // element has been mounted: the entry then waits for it.
  const found = cache.get(key);
  if (found !== undefined) return keep(cache, key, found); // (in use again)
  const entry = {};
  entry.promise = new Promise((resolve, reject) => {
    entry.resolve = resolve;
    entry.reject = reject;
  });
  entry.promise.catch(() => cache.delete(key));
  return keep(cache, key, entry);
}

export function baseOf(digest) {
  return entryIn(store.bases, digest);
}

export function provideBase(digest, png) {
  // A PNG, decoded without colour management (the blend works on the file's own values). The
  // digest names the image's content: decoded once.
  const entry = baseOf(digest);
  if (entry.provided) return;
  entry.provided = true;
  createImageBitmap(new Blob([png], { type: "image/png" }), {
    colorSpaceConversion: "none",
    premultiplyAlpha: "none",
  })
    .then((bitmap) => {
      const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
      const context = canvas.getContext("2d", { willReadFrequently: true });
      context.drawImage(bitmap, 0, 0);
      entry.pixels = context.getImageData(0, 0, bitmap.width, bitmap.height).data;
      entry.resolve(entry.pixels);
    })
    .catch(entry.reject);
}

export function provideHeats(heats, unpacked) {
  // Heatmaps' packed colormap indices by picture id (wire.packed_rows), inflated once per id;
  // `unpacked` is called after each (a picture waiting for them may show now).
  for (const [id, { packed, width }] of Object.entries(heats)) {
    const entry = entryIn(store.heats, id);
    if (entry.pixels !== undefined || entry.unpacking) continue;
    entry.unpacking = true;
    unpackRows(packed, width)
      .then((rows) => {
        entry.pixels = rows;
        entry.resolve(rows);
        unpacked();
      })
      .catch(entry.reject);
  }
}
