// The pixels: a heatmap coloured from a colormap's table and, over an image, blended as
// Pillow's Image.blend does (its float32 arithmetic, truncated); a feature-map grid laid out
// and coloured as hookviz.colour_layers.GridSeries.coloured (its maps scaled in float32, as
// NumPy does); the colour bar. Tested pixel for pixel against hookviz.render in the browser.
//
// Drawn synchronously on a canvas: anything asynchronous (encoding a PNG for an <img>,
// decoding one) waits behind Streamlit's own re-render of the page, which takes the browser's
// main thread for 50-100 ms after every control change.

const blendTables = new Map(); // alpha -> (in1 << 8 | in2) -> Pillow's blend of the two
// colormap table -> its 256 colours as opaque RGBA words
const colourWords = new WeakMap();
// canvas -> its pixel buffer, kept between draws of the same size
const buffers = new WeakMap();

export function seriesOf(grid) {
  // A grid's series in each channel order (hookviz.colour_layers.GridSeries of that order's
  // channels): the feature maps' cells (float32; sent once for every order that shows them),
  // gathered here into each order's channel order, with each map's range; the order's label
  // boxes of each font as palette entries, with where each box's pixels start.
  const size = grid.rows * grid.columns;
  const cells = new Float32Array(grid.cells.buffer);
  const maps = cells.length / size;
  const low = new Float32Array(maps).fill(Infinity);
  const high = new Float32Array(maps).fill(-Infinity);
  for (let i = 0; i < cells.length; i++) {
    const m = Math.floor(i / size);
    low[m] = Math.min(low[m], cells[i]);
    high[m] = Math.max(high[m], cells[i]);
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
      channels: order.channels,
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

export function paintGrid(canvas, series, n, scale, lut) {
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
  const [red, green, blue] = series.background; // as one RGBA word per pixel (see paint)
  new Uint32Array(target.buffer).fill((red | (green << 8) | (blue << 16) | 0xff000000) >>> 0);
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
  let image = buffers.get(canvas);
  if (image === undefined || image.width !== canvas.width || image.height !== canvas.height) {
    image = new ImageData(canvas.width, canvas.height);
    buffers.set(canvas, image);
  }
  return image;
}

export function paint(canvas, indices, base, lut, alpha) {
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

export function paintRamp(canvas, lut) {
  // render.colorbar: entry x at column x, 0 (left) to 1 (right)
  const out = new ImageData(canvas.width, canvas.height);
  for (let i = 0; i < out.data.length; i += 4) {
    const entry = ((i / 4) % canvas.width) * 3;
    out.data.set([lut[entry], lut[entry + 1], lut[entry + 2], 255], i);
  }
  put(canvas, out);
}

export function canvasIn(root, name, width, height) {
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
