// A picture the browser colours itself: the CAM overlay (with its colour bar), the raw heatmap
// or the feature-map grid, recoloured and blended here from colormap indices (and, for the
// overlay, the display-size image; for the grid, its feature maps' cells and label boxes, from
// which it lays out any number of channels, in any channel order it was sent, on either colour
// scale). It follows the sidebar's opacity, colormap, "channels shown", channel-order and
// colour-scale widgets as they change, so a display change shows at once, without waiting for
// a server run (which still follows, and keeps the address and the downloads current).
//
// It follows the layer box too: each picture it was sent is kept (a few layers' worth) with the
// texts that name its layer, under its context (image, model, weights, class, method). When the
// box names a layer whose pictures are all here, for the contexts now shown, and nothing else
// beside them names the layer (the server's `ready`; no open panel in the main area), the
// three pictures show that layer at once, texts included; the server's run that follows sends
// the same pictures, which are not drawn again. Otherwise they wait for the server, as before.
//
// And it follows the sidebar's class widgets: the top-5 classes' heatmaps come ahead with the
// page (ui/top_classes.py, a hidden element), with the overlay's texts of each class; so do
// the classes the class box lists as the user searches it, once its matches fit in the open
// list (or an option is pointed at, or reached with the arrow keys): the page asks the server
// for them (`watchBox`), whose answer comes in another hidden element. A click on the radio,
// or on one of those classes in the box, shows that class's overlay and raw heatmap at once
// (the grid is the same for every class), the other class widget faded until the server's run
// names the class; not while something beside them depends on the class (an open panel, the
// grid ordered by the class's channel weights, a warning under the heatmap).
//
// The pixels are those of hookviz.render.overlay at display size and render.laid_out_grid: the
// colour is the colormap table at each index (render.colormap_table / colormap_indices), the
// blend is Pillow's Image.blend, in its float32 arithmetic with truncation, and a grid is
// hookviz.colour_layers.GridSeries.coloured (its maps scaled in float32, as NumPy does).
//
// Why a canvas, drawn synchronously where the widget changes: anything asynchronous (encoding a
// PNG for an <img>, decoding one) waits behind Streamlit's own re-render of the page, which
// takes the browser's main thread for 50-100 ms after every control change on this page.
//
// Streamlit calls the default export on every mount and whenever `data` changes, with the same
// parentElement. Each canvas counts its draws in `data-drawn` and dispatches a bubbling
// "hookviz:drawn" event after each; the picture's element carries what it shows in `data-alpha`,
// `data-cmap` and (a grid) `data-channels`, `data-scale`, `data-order`, and `data-layer` (the
// layer box's label of the layer it shows): what tests and the page benchmark wait for.

const bases = new Map(); // image digest -> an entry of its display-size pixels
const heats = new Map(); // picture id -> an entry of its colormap indices, or a grid's series
// of each: the current pictures and a few layers' before them (an overlay and a grid a layer,
// and the top-5 classes' heatmaps sent ahead for each)
const KEPT = 30;
const blendTables = new Map(); // alpha -> (in1 << 8 | in2) -> Pillow's blend of the two
// role|context|layer label -> the record of a picture sent before (its data, without pixels)
const records = new Map();
// role -> the data of the picture of that role now mounted (what a swap must cover)
const mounted = new Map();
// context (forward pass and method) -> { options: the top-5 radio's option -> its class's
// record, labels: the class box's label -> a class's record }: each record its overlay texts
// and picture id (ui/top_classes.py, sent ahead)
const classSets = new Map();
// The user's last class choice in the page: { radio, option } after a choice on the top-5
// radio, { box, label } after one in the class box (label null when picked from the keyboard:
// the box then shows it once closed). Only the widget the user chose in is followed: each lags
// the server's runs after a choice in the other (a class picked in the box leaves the last
// top-5 button lit until the radio's own redraw), so its state alone is not the user's wish.
let classInput = null;
const RADIO_KEYS = ["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", " "]; // change a radio
// The class box's questions (`watchBox`): the matches of what was typed are asked as soon as the
// list shows them (a frame later); an option the pointer or the arrow keys reach, once it has
// stayed there a moment (passing over options asks for none)
const LISTED_MS = 16;
const RESTING_MS = 60;
const TYPED_MATCHES = 4; // the most matches of what was typed asked for at once
const TYPED_WAIT_MS = 1000; // how long after a key the list's redraw is taken for its answer

function keep(cache, key, value, most = KEPT) {
  // the latest use last: the least recently used goes first
  cache.delete(key);
  cache.set(key, value);
  while (cache.size > most) cache.delete(cache.keys().next().value);
  return value;
}

function plain(text) {
  // a select box's label as the box and its options show it (runs of spaces folded)
  return String(text).replace(/\s+/g, " ").trim();
}

function recordKey(role, context, label) {
  return `${role}|${context}|${plain(label)}`;
}

function remember(data) {
  // What showing this picture again needs, minus its pixels (kept in `heats` by its id).
  if (!data.swap) return;
  const record = { ...data };
  if (data.grid) {
    const orders = Object.fromEntries(Object.keys(data.grid.orders).map((name) => [name, true]));
    record.grid = { count: data.grid.count, orders };
  }
  keep(records, recordKey(data.role, data.swap.context, data.swap.label), record, 3 * KEPT);
}

function panelOpen() {
  // An open expander in the main area ("What am I looking at?", the channels behind the
  // heatmap) shows texts of the layer on screen: a swap would leave them behind.
  return document.querySelector('[data-testid="stMain"] [data-testid="stExpander"] details[open]') !== null;
}

function fadeElsewhere(keys, label) {
  // The texts elsewhere that describe the layer (the server's `elsewhere`) are the last
  // layer's until the server's run redraws them: faded until their content changes, or until
  // the pictures show the server's own again (`unfade`).
  for (const key of keys || []) {
    const element = document.querySelector(`.${keyClass(key)}`);
    // (once per swap: redrawn by the server meanwhile, it is current)
    if (element === null || element.__hvSwap === label) continue;
    element.__hvSwap = label;
    element.dataset.hvStale = "true";
    // (redrawn: current; the attribute goes, the swap's label stays, so it is faded once)
    const watcher = new MutationObserver(() => {
      delete element.dataset.hvStale;
      watcher.disconnect();
    });
    watcher.observe(element, { subtree: true, childList: true, characterData: true });
    element.__hvWatcher = watcher;
  }
}

function unfade(keys) {
  for (const key of keys || []) {
    const element = document.querySelector(`.${keyClass(key)}`);
    if (element === null || element.__hvSwap == null) continue;
    element.__hvWatcher.disconnect();
    delete element.dataset.hvStale;
    element.__hvSwap = null;
  }
}

function radioChoice(key) {
  // The option checked in the radio with this Streamlit key (its index, as text), or null when
  // none is (a class picked in the box outside the top-5) or there is no such radio.
  const checked = document.querySelector(`.${keyClass(key)} input[type="radio"]:checked`);
  return checked === null ? null : checked.value;
}

function classFollow(data) {
  // The record of this picture for the class the user last chose (the top-5 radio or the class
  // box), when that is another class than the one it shows and its picture was sent ahead
  // (ui/top_classes.py); else null (the page waits for the server). Not while something beside
  // it depends on the class: a warning under it, an open panel in the main area, the grid
  // ordered by the class's channel weights.
  const follow = data.follow.classes;
  if (!follow || !follow.ready || !classInput) return null;
  const set = classSets.get(follow.context);
  let option;
  let fade;
  if (classInput.radio === follow.radio) {
    const picked = classInput.option;
    if (picked === null || picked === follow.option || radioChoice(follow.radio) !== picked) {
      return null;
    }
    option = set ? set.options[picked] : undefined;
    fade = follow.box;
  } else if (classInput.box === follow.box) {
    // the box's choice: the option pressed, and once the box is closed what it shows
    const shown = widgetValue(follow.box);
    const picked = typeof shown === "string" ? shown : classInput.label;
    if (picked === null || (classInput.label !== null && plain(picked) !== plain(classInput.label))) {
      return null;
    }
    if (plain(picked) === plain(follow.label)) return null;
    option = set ? set.labels.get(plain(picked)) : undefined;
    fade = follow.radio;
  } else {
    return null;
  }
  const entry = option ? heats.get(option.id) : undefined;
  if (!option || !option.ready || !entry || entry.pixels === undefined || panelOpen()) return null;
  const grid = mounted.get("grid");
  if (grid && grid.orderings) {
    const order = grid.orderings[parseInt(widgetValue(grid.follow.order), 10)];
    if (follow.unless_orders.includes(order)) return null;
  }
  const record = { ...data, id: option.id, ofClass: plain(option.label), fade };
  // the overlay's texts name the class; the heatmap's do not
  if (data.role === "overlay") Object.assign(record, pick(option, ["title", "alt", "captions"]));
  return record;
}

function keepClasses(classes) {
  // The classes' records sent ahead for a context, by the radio's option and by the box's
  // label (the top-5's come with the page, the box's listed ones as asked: added to them)
  const set = classSets.get(classes.context) || { options: {}, labels: new Map() };
  for (const record of Object.values(classes.options)) {
    if (record.option !== undefined) set.options[record.option] = record;
    set.labels.set(plain(record.label), record);
  }
  keep(classSets, classes.context, set, 8);
}

function classSettled() {
  // Whether the class the user last picked is the one the server's pictures show (its run
  // over the pictures done), or none was picked in this page.
  const overlay = mounted.get("overlay");
  if (classInput === null) return true;
  const follow = overlay ? overlay.follow.classes : null;
  if (!follow) return false;
  if (classInput.radio !== undefined) return classInput.option === follow.option;
  const shown = widgetValue(follow.box);
  const picked = classInput.label !== null ? classInput.label : shown;
  return typeof picked === "string" && plain(picked) === plain(follow.label);
}

function watchBox(ask, setTriggerValue) {
  // Ask the server for the classes the class box lists as the user searches it: the matches of
  // what was typed once they are a few (`TYPED_MATCHES`, the list no longer scrolling), as soon
  // as the list shows them; the option the pointer rests on, the option the arrow keys reach,
  // once they stay there a moment. Each label is asked once per context (each question is a
  // server run), while the list is open, and only once no run is in progress and the last
  // class picked is on screen from the server (`classSettled`; what was typed before waits
  // for that): a question is a Streamlit run, which sends every widget's state, and until the
  // server's run of a pick has redrawn the top-5 radio the browser still holds its last
  // choice, which the server would take for a new one. A pick drops what was not asked yet
  // (its own run computes it).
  const asked = new Set();
  const pending = new Set();
  let timer = null;
  let typed = -Infinity; // when the user last typed in the box
  const within = (event) =>
    event.target instanceof Element && event.target.closest(`.${keyClass(ask.box)}`) !== null;
  const inputOf = () => document.querySelector(`.${keyClass(ask.box)} input`);
  const listOf = () => {
    const input = inputOf();
    if (input === null || input.getAttribute("aria-expanded") !== "true") return null;
    const id = input.getAttribute("aria-controls");
    return id ? document.getElementById(id) : null;
  };
  const optionOf = (event) => {
    const list = listOf();
    const option = event.target instanceof Element ? event.target.closest('[role="option"]') : null;
    return list !== null && option !== null && list.contains(option) ? option : null;
  };
  const flush = () => {
    timer = null;
    const list = listOf();
    if (list === null) {
      pending.clear();
      return;
    }
    if (!quiet() || !classSettled()) {
      // (asked once the run is over and the last pick is on screen: the list may still be
      // open then, and its matches still wanted)
      timer = setTimeout(flush, RESTING_MS);
      return;
    }
    const options = [...list.querySelectorAll('[role="option"]')];
    const scrolls = [list, ...list.querySelectorAll("*")].some(
      (element) => element.scrollHeight > element.clientHeight + 1,
    );
    // The typed matches, once the list no longer scrolls and they are a few (the open list of
    // every class scrolls: none is asked until the typing narrows it, and the answer then
    // comes quickly; a larger list is read, and what the pointer or the keys rest on is
    // asked). The matches are the options that hold what was typed as typed ("tench" in
    // "tench", not in "trench coat": the box also lists options that hold its letters in
    // order) where there are any: fewer classes, a quicker answer.
    const labels = options.map((option) => plain(option.textContent));
    const text = plain(inputOf()?.value || "");
    const holding = labels.filter((label) => label.toLowerCase().includes(text.toLowerCase()));
    const matches = holding.length > 0 ? holding : labels;
    if (!scrolls && matches.length <= TYPED_MATCHES) {
      for (const label of matches) pending.add(label);
    }
    const question = [...pending];
    pending.clear();
    send(question);
  };
  // (a run in progress may be redrawing widgets whose states a question would send)
  const quiet = () => document.querySelector('[data-testid="stStatusWidget"]') === null;
  const send = (labels) => {
    // (not what was sent ahead already: the top-5, or asked before this element was mounted)
    const set = classSets.get(ask.context);
    const known = (label) => asked.has(label) || (set !== undefined && set.labels.has(label));
    const question = labels.filter((label) => label && !known(label)).slice(0, ask.most);
    if (question.length === 0) return;
    for (const label of question) asked.add(label);
    setTriggerValue("ask", { context: ask.context, labels: question });
  };
  const soon = (label, delay) => {
    if (label) pending.add(plain(label));
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(flush, delay);
  };
  const onInput = (event) => {
    // (a frame after the list shows what was typed; typing on meanwhile does not put it off:
    // the list read then is the newest)
    if (!within(event)) return;
    typed = performance.now();
    if (timer === null) timer = setTimeout(flush, LISTED_MS);
  };
  const listed = new MutationObserver(() => {
    // The list shows what was typed a moment after the key (the box filters its options in a
    // render of its own, which a busy page puts off): read again once it has, or a question
    // would go by an earlier key's list (too many matches then, and nothing asked). Any change
    // in the page counts while the list is open just after a key (the list's element itself
    // may be new; little else changes meanwhile). As with the keys, a redraw does not put off
    // a read already due (one per redraw would wait for the typing to stop).
    if (performance.now() - typed > TYPED_WAIT_MS || timer !== null) return;
    if (listOf() !== null) timer = setTimeout(flush, LISTED_MS);
  });
  listed.observe(document.body, { subtree: true, childList: true });
  const onPointer = (event) => {
    // (moves, not "over": the options the typing redraws under a pointer at rest are "over"
    // it without being pointed at, and each would put off the read of the typed matches)
    const option = optionOf(event);
    if (option !== null) soon(option.textContent, RESTING_MS);
  };
  const drop = () => {
    // A pick drops what was not asked yet: its own run computes it. (Asking for it at the
    // press would be no faster: the browser would send the question and the pick together,
    // as one run of this fragment.)
    if (timer !== null) clearTimeout(timer);
    timer = null;
    pending.clear();
  };
  const onPress = (event) => {
    if (optionOf(event) !== null) drop();
  };
  const onKey = (event) => {
    if (!within(event)) return;
    if (event.key === "Enter") return drop();
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    setTimeout(() => {
      // (the option the keys reach is the input's active descendant)
      const input = inputOf();
      const id = input ? input.getAttribute("aria-activedescendant") : null;
      const active = id ? document.getElementById(id) : null;
      if (active !== null && listOf() !== null) soon(active.textContent, RESTING_MS);
    }, 0);
  };
  document.addEventListener("input", onInput, true);
  document.addEventListener("pointermove", onPointer, true);
  document.addEventListener("pointerdown", onPress, true);
  document.addEventListener("keydown", onKey, true);
  return () => {
    if (timer !== null) clearTimeout(timer);
    listed.disconnect();
    document.removeEventListener("input", onInput, true);
    document.removeEventListener("pointermove", onPointer, true);
    document.removeEventListener("pointerdown", onPress, true);
    document.removeEventListener("keydown", onKey, true);
  };
}

function pick(object, names) {
  return Object.fromEntries(names.map((name) => [name, object[name]]));
}

function swapFor(label) {
  // The records of every picture now mounted for the layer the box labels `label`: each
  // picture's own data where it shows that layer, else the one kept under its context. Null
  // unless all are here, with their pixels, and every one of them is ready.
  const found = new Map();
  for (const [role, data] of mounted) {
    if (!data.swap || !data.swap.ready) return null;
    if (plain(data.swap.label) === plain(label)) {
      found.set(role, data);
      continue;
    }
    const record = records.get(recordKey(role, data.swap.context, label));
    const entry = record ? heats.get(record.id) : undefined;
    if (!record || !record.swap.ready || !entry || entry.pixels === undefined) return null;
    found.set(role, record);
  }
  return found.size > 0 && !panelOpen() ? found : null;
}

function unpack(payload) {
  // ui/wire.py's payload: a 4-byte little-endian length, that much JSON, then the binary
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

function entryIn(cache, key) {
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

function baseOf(digest) {
  return entryIn(bases, digest);
}

function seriesOf(grid) {
  // A grid's series in each channel order (hookviz.colour_layers.GridSeries of that order's
  // channels): the feature maps' cells (float32; sent once for every order that shows them),
  // gathered here into each order's channel order, with each map's range; the order's label
  // boxes of each font as palette entries, with where each box's pixels start.
  const size = grid.rows * grid.columns;
  const cells = new Float32Array(grid.cells.buffer);
  const maps = cells.length / size;
  const low = new Float32Array(maps);
  const high = new Float32Array(maps);
  for (let m = 0; m < maps; m++) {
    let least = Infinity;
    let most = -Infinity;
    for (let i = m * size; i < (m + 1) * size; i++) {
      least = Math.min(least, cells[i]);
      most = Math.max(most, cells[i]);
    }
    low[m] = least;
    high[m] = most;
  }
  const orders = {};
  for (const [name, order] of Object.entries(grid.orders)) {
    const own = new Float32Array(order.take.length * size);
    order.take.forEach((m, t) => own.set(cells.subarray(m * size, (m + 1) * size), t * size));
    const labels = order.labels.map((set) => {
      const raw = set.pixels;
      const offsets = new Int32Array(set.boxes.length / 4);
      for (let p = 0, at = 0; p < offsets.length; p++) {
        offsets[p] = at;
        at += set.boxes[4 * p + 2] * set.boxes[4 * p + 3];
      }
      return { boxes: set.boxes, offsets, pixels: set.wide ? new Uint16Array(raw.buffer) : raw };
    });
    orders[name] = {
      ...grid,
      size,
      cells: own,
      low: Float32Array.from(order.take, (m) => low[m]),
      high: Float32Array.from(order.take, (m) => high[m]),
      fonts: order.fonts,
      labels,
      palette: order.palette,
    };
  }
  return orders;
}

function tileIndices(series, n, scale) {
  // The first n maps' colormap indices: render.normalise_maps in float32 (Math.fround after
  // each operation on float32 operands gives NumPy's float32 result), then
  // render.colormap_indices. Each map on its own range ("channel"), or one range over the n.
  let sharedLow = Infinity;
  let sharedHigh = -Infinity;
  for (let t = 0; scale === "shared" && t < n; t++) {
    sharedLow = Math.min(sharedLow, series.low[t]);
    sharedHigh = Math.max(sharedHigh, series.high[t]);
  }
  const out = new Uint8Array(n * series.size);
  for (let t = 0; t < n; t++) {
    const low = scale === "shared" ? sharedLow : series.low[t];
    const spread = Math.fround((scale === "shared" ? sharedHigh : series.high[t]) - low);
    for (let i = t * series.size; i < (t + 1) * series.size; i++) {
      const value = spread > 0 ? Math.fround(Math.fround(series.cells[i] - low) / spread) : 0;
      out[i] = Math.min(Math.trunc(Math.min(Math.max(value, 0), 1) * 256), 255);
    }
  }
  return out;
}

function paintGrid(canvas, series, n, scale, lut) {
  // GridSeries.coloured(n): the background, each tile's cells `zoom` pixels square (tile t at
  // row t / per_row, column t % per_row, `gap` apart), then the label boxes of n's font.
  const perRow = series.per_row[n - 1];
  const rows = Math.ceil(n / perRow);
  const tileH = series.rows * series.zoom;
  const tileW = series.columns * series.zoom;
  const width = perRow * tileW + (perRow - 1) * series.gap;
  const height = rows * tileH + (rows - 1) * series.gap;
  if (canvas.width !== width) canvas.width = width;
  if (canvas.height !== height) canvas.height = height;
  const out = new ImageData(width, height);
  const target = out.data;
  const [red, green, blue] = series.background;
  for (let i = 0; i < target.length; i += 4) {
    target[i] = red;
    target[i + 1] = green;
    target[i + 2] = blue;
    target[i + 3] = 255;
  }
  const indices = tileIndices(series, n, scale);
  const corner = (t) => [
    Math.floor(t / perRow) * (tileH + series.gap),
    (t % perRow) * (tileW + series.gap),
  ];
  for (let t = 0; t < n; t++) {
    const [top, left] = corner(t);
    for (let y = 0; y < tileH; y++) {
      const from = t * series.size + Math.floor(y / series.zoom) * series.columns;
      for (let x = 0, at = ((top + y) * width + left) * 4; x < tileW; x++, at += 4) {
        const entry = indices[from + Math.floor(x / series.zoom)] * 3;
        target[at] = lut[entry];
        target[at + 1] = lut[entry + 1];
        target[at + 2] = lut[entry + 2];
      }
    }
  }
  const labels = series.labels[series.fonts[n - 1]];
  const palette = series.palette;
  for (let t = 0; t < n; t++) {
    const [boxX, boxY, boxW, boxH] = labels.boxes.slice(4 * t, 4 * t + 4);
    const [top, left] = corner(t);
    for (let y = 0, k = labels.offsets[t]; y < boxH; y++) {
      const row = top + boxY + y;
      for (let x = 0; x < boxW; x++, k++) {
        const column = left + boxX + x;
        // a box reaching past the grid's edge is cut there, as Pillow cuts it
        if (row < 0 || row >= height || column < 0 || column >= width) continue;
        const at = (row * width + column) * 4;
        const colour = labels.pixels[k] * 3;
        target[at] = palette[colour];
        target[at + 1] = palette[colour + 1];
        target[at + 2] = palette[colour + 2];
      }
    }
  }
  put(canvas, out);
}

async function unpackRows(packed, width) {
  // ui/wire.py's packed_rows back: inflate (zlib), then add each row to the one below it,
  // top to bottom (a Uint8Array wraps mod 256, as NumPy's uint8 does).
  const stream = new Blob([packed]).stream().pipeThrough(new DecompressionStream("deflate"));
  const rows = new Uint8Array(await new Response(stream).arrayBuffer());
  for (let i = width; i < rows.length; i++) rows[i] += rows[i - width];
  return rows;
}

function provide(digest, png) {
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

function blendTable(alpha) {
  // Pillow: out = (float)(in1 + alpha * (in2 - in1)), 0 at or below 0, 255 at or above, else
  // truncated; alpha is a C float. 65,536 pairs once per opacity, then a lookup per channel.
  let table = blendTables.get(alpha);
  if (table === undefined) {
    const a = Math.fround(alpha);
    table = new Uint8Array(65536);
    for (let first = 0; first < 256; first++) {
      for (let second = 0; second < 256; second++) {
        const value = Math.fround(first + Math.fround(a * (second - first)));
        table[(first << 8) | second] = value <= 0 ? 0 : value >= 255 ? 255 : Math.trunc(value);
      }
    }
    if (blendTables.size > 24) blendTables.clear();
    blendTables.set(alpha, table);
  }
  return table;
}

// colormap table -> its 256 colours as opaque RGBA words
const colourWords = new WeakMap();

function wordsOf(lut) {
  let words = colourWords.get(lut);
  if (words === undefined) {
    words = new Uint32Array(256);
    for (let k = 0; k < 256; k++) {
      words[k] = (lut[3 * k] | (lut[3 * k + 1] << 8) | (lut[3 * k + 2] << 16) | 0xff000000) >>> 0;
    }
    colourWords.set(lut, words);
  }
  return words;
}

function imageFor(canvas) {
  // The canvas's pixel buffer, kept between draws of the same size: a display-size picture is
  // up to 4 MB, allocated and cleared on every draw otherwise.
  let image = canvas.__hvImage;
  if (image === undefined || image.width !== canvas.width || image.height !== canvas.height) {
    image = new ImageData(canvas.width, canvas.height);
    canvas.__hvImage = image;
  }
  return image;
}

function paint(canvas, indices, base, lut, alpha) {
  // Each pixel is its index's colour, or (over an image) Pillow's blend of the image's pixel
  // and that colour, channel by channel from the opacity's table. One 32-bit word per pixel (a
  // third of the time of writing its bytes one by one): red in the low byte, as every platform
  // browsers run on (little-endian, as WebAssembly requires) stores it.
  const out = imageFor(canvas);
  const count = indices.length;
  const target = new Uint32Array(out.data.buffer, out.data.byteOffset, count);
  if (base === null) {
    const words = wordsOf(lut);
    for (let p = 0; p < count; p++) target[p] = words[indices[p]];
  } else {
    const source = new Uint32Array(base.buffer, base.byteOffset, count);
    const table = blendTable(alpha); // row: the image's channel (high byte); column: the colour's
    for (let p = 0; p < count; p++) {
      const entry = indices[p] * 3;
      const pixel = source[p];
      target[p] =
        (table[((pixel & 0xff) << 8) | lut[entry]] |
          (table[(pixel & 0xff00) | lut[entry + 1]] << 8) |
          (table[((pixel >>> 8) & 0xff00) | lut[entry + 2]] << 16) |
          0xff000000) >>>
        0;
    }
  }
  put(canvas, out);
}

function put(canvas, pixels) {
  canvas.getContext("2d").putImageData(pixels, 0, 0);
  canvas.dataset.drawn = String(Number(canvas.dataset.drawn || 0) + 1);
  canvas.dispatchEvent(new CustomEvent("hookviz:drawn", { bubbles: true }));
}

function paintRamp(canvas, lut) {
  // render.colorbar: entry x at column x, 0 (left) to 1 (right)
  const out = new ImageData(canvas.width, canvas.height);
  for (let i = 0; i < out.data.length; i += 4) {
    const entry = ((i / 4) % canvas.width) * 3;
    out.data.set([lut[entry], lut[entry + 1], lut[entry + 2], 255], i);
  }
  put(canvas, out);
}

function keyClass(key) {
  // Streamlit's class for a widget's container: st-key-<key>, with anything but letters,
  // digits, "_" and "-" made "-"
  return `st-key-${key.trim().replaceAll(/[^a-zA-Z0-9_-]/g, "-")}`;
}

function widgetValue(key) {
  // The value of the sidebar widget with this Streamlit key (its container has the class
  // st-key-<key>); undefined while it is an open select box, whose text is then what the user
  // types to filter it, not a choice; null without such a widget. (A radio's value is the
  // index of the option checked.)
  if (!key) return null;
  const checked = document.querySelector(`.${keyClass(key)} input[type="radio"]:checked`);
  if (checked !== null) return checked.value;
  const input = document.querySelector(`.${keyClass(key)} input`);
  if (input === null) return null;
  if (input.getAttribute("aria-expanded") === "true") return undefined;
  return input.value;
}

function pressedOption(event, key) {
  // The option of the select box with this key that a click landed on, if any: the picture
  // follows at the click itself, without waiting for the box to close and show the choice.
  const option = event.target instanceof Element ? event.target.closest('[role="option"]') : null;
  if (!key || option === null) return null;
  const input = document.querySelector(`.${keyClass(key)} input`);
  const list = option.closest('[role="listbox"]');
  if (input === null || list === null || input.getAttribute("aria-controls") !== list.id) {
    return null;
  }
  return option.textContent.trim();
}

function canvasIn(root, name, width, height) {
  // (a grid's size depends on how many channels it shows: set where it is drawn)
  let canvas = root.querySelector(`canvas.${name}`);
  if (canvas === null) {
    canvas = document.createElement("canvas");
    canvas.className = name;
    canvas.id = `hv-${Math.random().toString(36).slice(2)}`; // tells its draws from others
    canvas.setAttribute("role", "img");
    root.appendChild(canvas);
  }
  if (width !== undefined && canvas.width !== width) canvas.width = width;
  if (height !== undefined && canvas.height !== height) canvas.height = height;
  return canvas;
}

export default function (component) {
  const { parentElement } = component;
  const data = unpack(component.data);
  if (data.sources) {
    // The images the pictures blend over, sent once per image (from outside the results, so
    // that a class change does not send the image again): nothing to draw.
    for (const [digest, png] of Object.entries(data.sources)) provide(digest, png);
    return () => {};
  }
  if (data.ask) {
    // The element the page asks with for the class box's listed classes: nothing to draw.
    return watchBox(data.ask, component.setTriggerValue);
  }
  if (data.classes) {
    // Other classes' pictures sent ahead (their indices come with them, below)
    keepClasses(data.classes);
  }
  if (data.heats) {
    // The overlay's and the raw heatmap's colormap indices by picture id, in an element of
    // their own that changes only with the analysis (Streamlit then sends them once), packed
    // (ui/wire.py's packed_rows): inflated once per picture id. Nothing to draw. (Also the
    // top-5 classes' indices, sent ahead.)
    for (const [id, { packed, width }] of Object.entries(data.heats)) {
      const entry = entryIn(heats, id);
      if (entry.pixels !== undefined || entry.unpacking) continue;
      entry.unpacking = true;
      unpackRows(packed, width)
        .then((rows) => {
          entry.pixels = rows;
          entry.resolve(rows);
          // A class picked while its pictures were on their way shows now: once its indices
          // are unpacked (an answer that arrives just before the press is still being
          // unpacked at the press, and nothing else would redraw until the server's run)
          if (data.classes) document.dispatchEvent(new CustomEvent("hookviz:classes"));
        })
        .catch(entry.reject);
    }
    return () => {};
  }
  const tables = data.tables;
  // The pixels: a grid's sent with it, a heatmap's in the element before the overlay, by id.
  const heat = entryIn(heats, data.id);
  if (heat.pixels === undefined && data.grid) {
    heat.pixels = seriesOf(data.grid);
    heat.resolve(heat.pixels);
  }
  remember(data);
  mounted.set(data.role, data);

  let root = parentElement.querySelector(".hv-picture");
  if (root === null) {
    root = document.createElement("div");
    root.className = "hv-picture";
    root.setAttribute("data-testid", "hvPicture");
    parentElement.appendChild(root);
  }
  let title = root.querySelector(".hv-title");
  if (data.title !== undefined && title === null) {
    title = document.createElement("div");
    title.className = "hv-title";
    title.setAttribute("data-testid", "hvTitle");
    root.prepend(title);
  }
  const picture = canvasIn(root, "hv-main", data.width, data.height);
  const bar = data.bar ? canvasIn(root, "hv-bar", 256, 10) : null;
  if (bar !== null) bar.setAttribute("aria-label", "colour bar, 0 (left) to 1 (right)");
  const captions = [...root.querySelectorAll(".hv-caption")];
  while (captions.length < (data.captions || []).length) {
    const caption = document.createElement("div");
    caption.className = "hv-caption";
    caption.setAttribute("data-testid", "hvCaption");
    root.appendChild(caption);
    captions.push(caption);
  }

  // What is wanted now: the widget's value in the page (the user's latest); while a select box
  // is open, what is shown; without the widget, the server's value. (A grid's channel count
  // is kept within its series: the slider may still be another layer's for a moment.) The
  // picture is this one's data, or, where the layer box names another layer whose pictures are
  // all here (`swapFor`), that layer's record; `layer` is a label the user just pressed.
  let moved = false; // the slider, since this mount
  const wanted = (layer) => {
    const shown = root.__hvShown || { alpha: data.alpha, cmap: data.cmap };
    const alphaText = widgetValue(data.follow.alpha);
    const cmapText = widgetValue(data.follow.cmap);
    const alpha = parseFloat(alphaText);
    // the number of channels wished: the slider's, once moved from what the server showed;
    // until then the server's wish, which the slider of a smaller layer may not reach (it
    // shows as many as that layer has, and the next layer shows the wish again)
    const slider = parseInt(widgetValue(data.follow.channels), 10);
    if (slider >= 1 && slider !== data.channels) moved = true;
    const channels = moved ? slider : data.wished;
    const scale = data.scales ? data.scales[parseInt(widgetValue(data.follow.scale), 10)] : null;
    // an order this grid has (by activation or channel number); one by the class's channel
    // weights that it lacks waits for the server's grid
    const order = data.orderings
      ? data.orderings[parseInt(widgetValue(data.follow.order), 10)]
      : undefined;
    let record = data;
    let named = layer || (data.swap ? widgetValue(data.swap.box) : null);
    // (while the box is open, the layer last named)
    if (named === undefined) named = root.__hvNamed;
    else if (named) root.__hvNamed = named;
    if (named && plain(named) !== plain(data.swap.label)) {
      const swap = swapFor(named);
      if (swap !== null) record = swap.get(data.role) || data;
    }
    // the layer shown is the server's: another of the top-5 classes, if the radio names one
    if (record === data) record = classFollow(data) || data;
    return {
      record,
      id: record.id,
      alpha: alpha >= 0 && alpha <= 1 ? alpha : alphaText === undefined ? shown.alpha : data.alpha,
      cmap: cmapText in tables ? cmapText : cmapText === undefined ? shown.cmap : data.cmap,
      channels: record.grid
        ? Math.min(channels >= 1 ? channels : record.channels, record.grid.count)
        : null,
      scale: record.grid ? scale || record.scale : null,
      order: record.grid ? (order in record.grid.orders ? order : record.order) : null,
    };
  };
  const same = (a, b) =>
    !!a &&
    a.id === b.id &&
    a.alpha === b.alpha &&
    a.cmap === b.cmap &&
    a.channels === b.channels &&
    a.scale === b.scale &&
    a.order === b.order;

  const label = (want) => {
    // the texts of the picture shown (a grid's name its number of channels as {n})
    const record = want.record;
    const named = (text) => text.replaceAll("{n}", String(want.channels));
    picture.setAttribute("aria-label", named(record.alt));
    if (title !== null) title.textContent = record.title || "";
    captions.forEach((caption, index) => {
      caption.textContent = named((record.captions || [])[index] || "");
    });
    if (record.swap) root.dataset.layer = plain(record.swap.label);
  };

  const draw = (want, pixels, base) => {
    const record = want.record;
    label(want); // first: the texts are in place when the picture says it is drawn
    if (record.grid) {
      paintGrid(picture, pixels[want.order], want.channels, want.scale, tables[want.cmap]);
      root.dataset.channels = String(want.channels);
      root.dataset.scale = want.scale;
      root.dataset.order = want.order;
    } else {
      if (picture.width !== record.width) picture.width = record.width;
      if (picture.height !== record.height) picture.height = record.height;
      paint(picture, pixels, base, tables[want.cmap], want.alpha);
    }
    if (bar !== null && root.dataset.cmap !== want.cmap) paintRamp(bar, tables[want.cmap]);
    root.__hvShown = want;
    delete root.dataset.stale;
    root.dataset.alpha = String(want.alpha);
    root.dataset.cmap = want.cmap;
  };

  // Draw `want` at once when the indices (and the image) are here, else once they are, with
  // whatever is wanted by then.
  const show = (want) => {
    if (root.__hvMount !== mount) return;
    // another layer's (or class's) pictures: the texts elsewhere are still this layer's (this
    // class's); the server's own pictures: they are current (its run redraws them, before the
    // pictures of the results)
    const follow = data.follow.classes;
    if (want.record.ofClass !== undefined) {
      fadeElsewhere([want.record.fade], `class ${want.record.ofClass}`);
    } else if (want.record !== data) {
      fadeElsewhere(data.swap.elsewhere, want.record.swap.label);
    } else {
      if (data.swap) unfade(data.swap.elsewhere);
      if (follow) unfade([follow.box, follow.radio]);
    }
    if (same(root.__hvShown, want)) {
      label(want); // the same pixels: only the texts may be new (this mount's, not a record's)
      root.__hvShown = want;
      delete root.dataset.stale;
      return;
    }
    const entry = want.record === data ? heat : heats.get(want.id);
    const base = want.record.base ? baseOf(want.record.base) : null;
    if (entry.pixels !== undefined && (base === null || base.pixels !== undefined)) {
      return draw(want, entry.pixels, base && base.pixels); // in this task
    }
    // Until then what is on screen is the last picture, with its texts: marked stale, as
    // Streamlit marks its own elements during a run (a large photo's image takes a moment to
    // decode; the new photo beside it is current).
    root.dataset.stale = "true";
    Promise.all([entry.promise, base && base.promise])
      .then(() => {
        // still this picture's turn (no later mount): draw what is wanted by now
        if (root.__hvMount === mount) show(wanted());
      })
      .catch((error) => {
        delete root.dataset.stale;
        console.error("hookviz: could not draw the picture", error);
      });
  };
  const redraw = () => show(wanted());

  // Streamlit calls the returned cleanup only when the element goes, not before it calls this
  // again with new data: the previous call's watcher is stopped here, or two calls' watchers
  // would redraw their own data in turn.
  if (root.__hvStop) root.__hvStop();
  const mount = {};
  root.__hvMount = mount;
  redraw();
  // The display widgets live in the sidebar: follow their values as the user changes them.
  const watched = document.querySelector('[data-testid="stSidebar"]') || document.body;
  const observer = new MutationObserver(redraw);
  observer.observe(watched, {
    subtree: true,
    childList: true,
    characterData: true,
    attributes: true,
    // (a radio chosen from the keyboard moves its tabindex to the option checked)
    attributeFilter: ["value", "aria-expanded", "aria-valuetext", "tabindex"],
  });
  const classes = data.follow.classes;
  const noteClass = (event) => {
    // a choice on the top-5 radio (a click, or the arrow keys), or in the class box (a click
    // on an option, or Enter)
    if (!classes || !(event.target instanceof Element)) return;
    const choosing = event.type === "click" || RADIO_KEYS.includes(event.key);
    const pressed = pressedOption(event, classes.box);
    if (choosing && event.target.closest(`.${keyClass(classes.radio)}`) !== null) {
      // (checked by the event's default action, after this listener: read in the next task)
      setTimeout(() => {
        classInput = { radio: classes.radio, option: radioChoice(classes.radio) };
        redraw();
      }, 0);
    } else if (pressed !== null) {
      classInput = { box: classes.box, label: pressed };
      redraw();
    } else if (event.key === "Enter" && event.target.closest(`.${keyClass(classes.box)}`)) {
      classInput = { box: classes.box, label: null };
    }
  };
  const onClick = (event) => {
    noteClass(event);
    const cmap = pressedOption(event, data.follow.cmap);
    const layer = data.swap ? pressedOption(event, data.swap.box) : null;
    if (cmap in tables) show({ ...wanted(), cmap });
    else if (layer !== null) show(wanted(layer));
    // A radio (the colour scale, the channel order) is checked by the click's default action,
    // after this listener, and changes no attribute the observer sees: look again in the next
    // task.
    else setTimeout(redraw, 0);
  };
  document.addEventListener("click", onClick, true);
  document.addEventListener("keydown", noteClass, true);
  document.addEventListener("hookviz:classes", redraw);
  const stop = () => {
    document.removeEventListener("click", onClick, true);
    document.removeEventListener("keydown", noteClass, true);
    document.removeEventListener("hookviz:classes", redraw);
    observer.disconnect();
    if (root.__hvStop === stop) root.__hvStop = null;
  };
  root.__hvStop = stop;
  return () => {
    // the element goes: it no longer needs a swap to cover it
    stop();
    if (mounted.get(data.role) === data) mounted.delete(data.role);
  };
}
