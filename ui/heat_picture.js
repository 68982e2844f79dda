// A picture the browser colours itself: the CAM overlay (with its colour bar), the raw heatmap
// or the feature-map grid, recoloured and blended here from colormap indices (and, for the
// overlay, the display-size image; for the grid, the pixels no colormap changes). It follows
// the sidebar's opacity and colormap widgets as they change, so a display change shows at once,
// without waiting for a server run (which still follows, and keeps the address and the
// downloads current).
//
// The pixels are those of hookviz.render.overlay at display size and render.laid_out_grid: the
// colour is the colormap table at each index (render.colormap_table / colormap_indices), the
// blend is Pillow's Image.blend, in its float32 arithmetic with truncation, and a grid's fixed
// pixels are hookviz.colour_layers.GridLayers'.
//
// Why a canvas, drawn synchronously where the widget changes: anything asynchronous (encoding a
// PNG for an <img>, decoding one) waits behind Streamlit's own re-render of the page, which
// takes the browser's main thread for 50-100 ms after every control change on this page.
//
// Streamlit calls the default export on every mount and whenever `data` changes, with the same
// parentElement. Each canvas counts its draws in `data-drawn` and dispatches a bubbling
// "hookviz:drawn" event after each; the picture's element carries what it shows in `data-alpha`
// and `data-cmap`: what tests and the page benchmark wait for.

const bases = new Map(); // image digest -> an entry of its display-size pixels
const heats = new Map(); // picture id -> an entry of its colormap indices (and fixed pixels)
const KEPT = 4; // of each: the current picture and a few before it
const blendTables = new Map(); // alpha -> (in1 << 8 | in2) -> Pillow's blend of the two

function keep(cache, key, value) {
  cache.set(key, value);
  while (cache.size > KEPT) cache.delete(cache.keys().next().value);
  return value;
}

function bytesOf(base64) {
  const text = atob(base64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
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

function indicesOf(cells, width, height) {
  // A grid's indices from its feature maps' cells: each cell `zoom` pixels square, tile t at
  // row t / per_row and column t % per_row, `gap` pixels apart (hookviz.colour_layers).
  const source = bytesOf(cells.indices);
  const out = new Uint8Array(width * height);
  const tileH = cells.rows * cells.zoom;
  const tileW = cells.columns * cells.zoom;
  for (let t = 0; t < cells.tiles; t++) {
    const top = Math.floor(t / cells.per_row) * (tileH + cells.gap);
    const left = (t % cells.per_row) * (tileW + cells.gap);
    const first = t * cells.rows * cells.columns;
    for (let y = 0; y < tileH; y++) {
      const row = (top + y) * width + left;
      const from = first + Math.floor(y / cells.zoom) * cells.columns;
      for (let x = 0; x < tileW; x++) out[row + x] = source[from + Math.floor(x / cells.zoom)];
    }
  }
  return out;
}

function provide(digest, url) {
  // A PNG, decoded without colour management (the blend works on the file's own values).
  const entry = baseOf(digest);
  if (entry.url === url) return;
  entry.url = url;
  fetch(url)
    .then((response) => response.blob())
    .then((blob) =>
      createImageBitmap(blob, { colorSpaceConversion: "none", premultiplyAlpha: "none" }),
    )
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

function paint(canvas, picture, base, lut, alpha) {
  const out = new ImageData(canvas.width, canvas.height);
  const target = out.data;
  const { indices, fixed, colours } = picture;
  const table = base === null ? null : blendTable(alpha);
  for (let i = 0, p = 0, k = 0; p < indices.length; p++, i += 4) {
    const entry = indices[p] * 3;
    if (fixed !== null && (fixed[p >> 3] >> (7 - (p & 7))) & 1) {
      // a pixel no colormap changes (a grid's gaps and labels), in raster order
      target[i] = colours[k++];
      target[i + 1] = colours[k++];
      target[i + 2] = colours[k++];
    } else if (table === null) {
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
  // types to filter it, not a choice; null without such a widget.
  if (!key) return null;
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

function canvasIn(root, name, width, height, label) {
  let canvas = root.querySelector(`canvas.${name}`);
  if (canvas === null) {
    canvas = document.createElement("canvas");
    canvas.className = name;
    canvas.id = `hv-${Math.random().toString(36).slice(2)}`; // tells its draws from others
    canvas.setAttribute("role", "img");
    root.appendChild(canvas);
  }
  if (canvas.width !== width) canvas.width = width;
  if (canvas.height !== height) canvas.height = height;
  canvas.setAttribute("aria-label", label);
  return canvas;
}

export default function (component) {
  const { data, parentElement } = component;
  if (data.sources) {
    // The images the pictures blend over, sent once per image (from outside the results, so
    // that a class change does not send the image again): nothing to draw.
    for (const [digest, url] of Object.entries(data.sources)) provide(digest, url);
    return () => {};
  }
  const tables = {};
  for (const [name, text] of Object.entries(data.tables)) tables[name] = bytesOf(text);
  // The indices: sent with this picture, or (the raw heatmap) with the overlay, under one id.
  const heat = entryIn(heats, data.id);
  if (heat.pixels === undefined && (data.heat || data.cells)) {
    heat.pixels = {
      indices: data.cells ? indicesOf(data.cells, data.width, data.height) : bytesOf(data.heat),
      // a grid: its fixed pixels (one bit each) and their colours
      fixed: data.fixed ? bytesOf(data.fixed) : null,
      colours: data.colours ? bytesOf(data.colours) : null,
    };
    heat.resolve(heat.pixels);
  }

  let root = parentElement.querySelector(".hv-picture");
  if (root === null) {
    root = document.createElement("div");
    root.className = "hv-picture";
    root.setAttribute("data-testid", "hvPicture");
    parentElement.appendChild(root);
  }
  const picture = canvasIn(root, "hv-main", data.width, data.height, data.alt);
  const bar = data.bar ? canvasIn(root, "hv-bar", 256, 10, "colour bar, 0 (left) to 1 (right)") : null;

  // What is wanted now: the widget's value in the page (the user's latest); while a select box
  // is open, what is shown; without the widget, the server's value.
  const wanted = () => {
    const shown = root.__hvShown || data;
    const alphaText = widgetValue(data.follow.alpha);
    const cmapText = widgetValue(data.follow.cmap);
    const alpha = parseFloat(alphaText);
    return {
      id: data.id,
      alpha: alpha >= 0 && alpha <= 1 ? alpha : alphaText === undefined ? shown.alpha : data.alpha,
      cmap: cmapText in tables ? cmapText : cmapText === undefined ? shown.cmap : data.cmap,
    };
  };
  const same = (a, b) => !!a && a.id === b.id && a.alpha === b.alpha && a.cmap === b.cmap;

  const draw = (want, indices, base) => {
    paint(picture, indices, base, tables[want.cmap], want.alpha);
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
    attributeFilter: ["value", "aria-expanded", "aria-valuetext"],
  });
  const onClick = (event) => {
    const cmap = pressedOption(event, data.follow.cmap);
    if (cmap in tables) show({ ...wanted(), cmap });
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
