// A picture the browser colours itself: the CAM overlay (with its colour bar), the raw heatmap
// or the feature-map grid, recoloured and blended here from colormap indices (and, for the
// overlay, the display-size image; for the grid, its feature maps' cells and label boxes, from
// which it lays out any number of channels, in any channel order it was sent, on either colour
// scale). It follows the sidebar's opacity, colormap, "channels shown", channel-order and
// colour-scale widgets as they change, so a display change shows at once, without waiting for
// a server run (which still follows, and keeps the address and the downloads current).
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
// `data-cmap` and (a grid) `data-channels`, `data-scale` and `data-order`: what tests and the
// page benchmark wait for.

const bases = new Map(); // image digest -> an entry of its display-size pixels
const heats = new Map(); // picture id -> an entry of its colormap indices, or a grid's series
const KEPT = 4; // of each: the current picture and a few before it
const blendTables = new Map(); // alpha -> (in1 << 8 | in2) -> Pillow's blend of the two

function keep(cache, key, value) {
  cache.set(key, value);
  while (cache.size > KEPT) cache.delete(cache.keys().next().value);
  return value;
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
  let entry = cache.get(key);
  if (entry === undefined) {
    entry = {};
    entry.promise = new Promise((resolve, reject) => {
      entry.resolve = resolve;
      entry.reject = reject;
    });
    entry.promise.catch(() => cache.delete(key));
    keep(cache, key, entry);
  }
  return entry;
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

function paint(canvas, indices, base, lut, alpha) {
  const out = new ImageData(canvas.width, canvas.height);
  const target = out.data;
  const table = base === null ? null : blendTable(alpha);
  for (let i = 0, p = 0; p < indices.length; p++, i += 4) {
    const entry = indices[p] * 3;
    if (table === null) {
      target[i] = lut[entry];
      target[i + 1] = lut[entry + 1];
      target[i + 2] = lut[entry + 2];
    } else {
      target[i] = table[(base[i] << 8) | lut[entry]];
      target[i + 1] = table[(base[i + 1] << 8) | lut[entry + 1]];
      target[i + 2] = table[(base[i + 2] << 8) | lut[entry + 2]];
    }
    target[i + 3] = 255;
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

function widgetValue(key) {
  // The value of the sidebar widget with this Streamlit key (its container has the class
  // st-key-<key>); undefined while it is an open select box, whose text is then what the user
  // types to filter it, not a choice; null without such a widget. (A radio's value is the
  // index of the option checked.)
  if (!key) return null;
  const checked = document.querySelector(`.st-key-${key} input[type="radio"]:checked`);
  if (checked !== null) return checked.value;
  const input = document.querySelector(`.st-key-${key} input`);
  if (input === null) return null;
  if (input.getAttribute("aria-expanded") === "true") return undefined;
  return input.value;
}

function pressedOption(event, key) {
  // The option of the select box with this key that a click landed on, if any: the picture
  // follows at the click itself, without waiting for the box to close and show the choice.
  const option = event.target instanceof Element ? event.target.closest('[role="option"]') : null;
  if (!key || option === null) return null;
  const input = document.querySelector(`.st-key-${key} input`);
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
  const tables = data.tables;
  // The indices: sent with this picture, or (the raw heatmap) with the overlay, under one id.
  const heat = entryIn(heats, data.id);
  if (heat.pixels === undefined && (data.heat || data.grid)) {
    heat.pixels = data.grid ? seriesOf(data.grid) : data.heat;
    heat.resolve(heat.pixels);
  }

  let root = parentElement.querySelector(".hv-picture");
  if (root === null) {
    root = document.createElement("div");
    root.className = "hv-picture";
    root.setAttribute("data-testid", "hvPicture");
    parentElement.appendChild(root);
  }
  const picture = canvasIn(root, "hv-main", data.width, data.height);
  picture.setAttribute("aria-label", data.alt.replaceAll("{n}", String(data.channels)));
  const bar = data.bar ? canvasIn(root, "hv-bar", 256, 10) : null;
  if (bar !== null) bar.setAttribute("aria-label", "colour bar, 0 (left) to 1 (right)");
  let caption = root.querySelector(".hv-caption");
  if (data.caption && caption === null) {
    caption = document.createElement("div");
    caption.className = "hv-caption";
    caption.setAttribute("data-testid", "hvCaption");
    root.appendChild(caption);
  }

  // What is wanted now: the widget's value in the page (the user's latest); while a select box
  // is open, what is shown; without the widget, the server's value. (A grid's channel count
  // is kept within its series: the slider may still be another layer's for a moment.)
  const wanted = () => {
    const shown = root.__hvShown || data;
    const alphaText = widgetValue(data.follow.alpha);
    const cmapText = widgetValue(data.follow.cmap);
    const alpha = parseFloat(alphaText);
    const channels = parseInt(widgetValue(data.follow.channels), 10);
    const scale = data.scales ? data.scales[parseInt(widgetValue(data.follow.scale), 10)] : null;
    // an order this grid has (by activation or channel number); one by the class's channel
    // weights that it lacks waits for the server's grid
    const order = data.orderings
      ? data.orderings[parseInt(widgetValue(data.follow.order), 10)]
      : undefined;
    return {
      id: data.id,
      alpha: alpha >= 0 && alpha <= 1 ? alpha : alphaText === undefined ? shown.alpha : data.alpha,
      cmap: cmapText in tables ? cmapText : cmapText === undefined ? shown.cmap : data.cmap,
      channels: data.grid
        ? Math.min(channels >= 1 ? channels : data.channels, data.grid.count)
        : null,
      scale: data.grid ? scale || data.scale : null,
      order: data.grid ? (order in data.grid.orders ? order : data.order) : null,
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

  const draw = (want, pixels, base) => {
    if (data.grid) {
      paintGrid(picture, pixels[want.order], want.channels, want.scale, tables[want.cmap]);
      const named = (text) => text.replaceAll("{n}", String(want.channels));
      picture.setAttribute("aria-label", named(data.alt));
      if (caption !== null) caption.textContent = named(data.caption);
      root.dataset.channels = String(want.channels);
      root.dataset.scale = want.scale;
      root.dataset.order = want.order;
    } else {
      paint(picture, pixels, base, tables[want.cmap], want.alpha);
    }
    if (bar !== null && root.dataset.cmap !== want.cmap) paintRamp(bar, tables[want.cmap]);
    root.__hvShown = want;
    root.dataset.alpha = String(want.alpha);
    root.dataset.cmap = want.cmap;
  };

  // Draw `want` at once when the indices (and the image) are here, else once they are, with
  // whatever is wanted by then.
  const show = (want) => {
    if (root.__hvMount !== mount || same(root.__hvShown, want)) return;
    const base = data.base ? baseOf(data.base) : null;
    if (heat.pixels !== undefined && (base === null || base.pixels !== undefined)) {
      return draw(want, heat.pixels, base && base.pixels); // in this task
    }
    Promise.all([heat.promise, base && base.promise])
      .then(() => {
        // still this picture's turn (no later mount, no draw of a newer value meanwhile)
        if (root.__hvMount === mount && !same(root.__hvShown, wanted())) {
          draw(wanted(), heat.pixels, base && base.pixels);
        }
      })
      .catch((error) => console.error("hookviz: could not draw the picture", error));
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
  const onClick = (event) => {
    const cmap = pressedOption(event, data.follow.cmap);
    if (cmap in tables) show({ ...wanted(), cmap });
    // A radio (the colour scale, the channel order) is checked by the click's default action,
    // after this listener, and changes no attribute the observer sees: look again in the next
    // task.
    else setTimeout(redraw, 0);
  };
  document.addEventListener("click", onClick, true);
  const stop = () => {
    document.removeEventListener("click", onClick, true);
    observer.disconnect();
    if (root.__hvStop === stop) root.__hvStop = null;
  };
  root.__hvStop = stop;
  return stop;
}
