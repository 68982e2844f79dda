// A layer seen before: each picture sent is kept (a few layers' worth, without its pixels,
// which stay in store.heats) with the texts that name its layer, under its context (image,
// model, weights, class, method: hookviz/app/browser/pictures.py's Swap). When the layer box names a
// layer whose pictures are all here for the contexts now shown, and nothing else beside them
// names the layer (the server's `ready`; no open panel in the main area), the pictures show
// that layer at once, texts included; the server's run that follows sends the same pictures,
// which are not drawn again.
import { panelOpen, plain } from "./dom.js";
import { keep, store } from "./store.js";

function recordKey(role, context, label) {
  return `${role}|${context}|${plain(label)}`;
}

export function remember(data) {
  // What showing this picture again needs, minus its pixels (kept in store.heats by its id).
  if (!data.swap) return;
  const record = { ...data };
  if (data.grid) {
    const orders = Object.fromEntries(Object.keys(data.grid.orders).map((name) => [name, true]));
    record.grid = { count: data.grid.count, orders };
  }
  keep(store.records, recordKey(data.role, data.swap.context, data.swap.label), record, 90);
}

export function swapFor(label) {
  // The records of every picture now mounted for the layer the box labels `label`: each
  // picture's own data where it shows that layer, else the one kept under its context. Null
  // unless all are here, with their pixels, and every one of them is ready.
  const found = new Map();
  for (const [role, data] of store.mounted) {
    if (!data.swap || !data.swap.ready) return null;
    if (plain(data.swap.label) === plain(label)) {
      found.set(role, data);
      continue;
    }
    const record = store.records.get(recordKey(role, data.swap.context, label));
    const entry = record ? store.heats.get(record.id) : undefined;
    if (!record || !record.swap.ready || !entry || entry.pixels === undefined) return null;
    found.set(role, record);
  }
  return found.size > 0 && !panelOpen() ? found : null;
}
