// For a projector: each picture can fill the screen (its full-screen button; Esc leaves), and
// the value under the pointer is written beside it (nobody in a room reads a colour bar to
// a tenth): the heatmap's value on the overlay and the raw heatmap, the channel and its
// activation on the feature-map grid. On the Present page, Esc leaves for Explore.
/* global DOM */

import { byKey } from "./dom.js";

const LEAVE = "present_leave"; // the key of the Present page's "Leave Present" button

export function presentable(root, picture, valueAt) {
  // `valueAt(x, y)`: the text of the value at a pixel of the picture shown, or null
  leaveOnEscape();
  if (root.querySelector(":scope > .hv-fullscreen") === null) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "hv-fullscreen";
    button.setAttribute("data-testid", "hvFullscreen");
    button.setAttribute("aria-label", "Show this picture full screen");
    button.title = "Full screen (Esc leaves)";
    // four corners (an icon of its own: the page's fonts lack the full-screen glyphs)
    button.innerHTML =
      '<svg width="18" height="18" viewBox="0 0 18 18" fill="none" stroke="currentColor" ' +
      'stroke-width="2"><path d="M1 6V1h5M12 1h5v5M17 12v5h-5M6 17H1v-5"/></svg>';
    button.addEventListener("click", () => {
      if (document.fullscreenElement === root) document.exitFullscreen();
      else root.requestFullscreen();
    });
    root.prepend(button);
    // in the picture's own corner, below its title (the title is part of what fills the
    // screen, so the button lives in the same box): placed again whenever either moves
    const place = () => {
      const full = document.fullscreenElement === root;
      button.style.top = full ? "" : `calc(${picture.offsetTop}px + 0.25rem)`;
      const right = root.clientWidth - picture.offsetLeft - picture.offsetWidth;
      button.style.right = full ? "" : `calc(${right}px + 0.25rem)`;
    };
    new ResizeObserver(place).observe(root);
    new ResizeObserver(place).observe(picture);
    root.addEventListener("fullscreenchange", place);
    place();
  }
  let value = root.querySelector(":scope > .hv-value");
  if (value === null) {
    value = document.createElement("div");
    value.className = "hv-value";
    value.setAttribute("data-testid", "hvValue");
    value.setAttribute("aria-live", "off");
    picture.after(value);
  }
  picture.onmousemove = (event) => {
    // the picture within its box (full screen fits it inside, keeping its shape)
    const box = picture.getBoundingClientRect();
    const scale = Math.min(box.width / picture.width, box.height / picture.height);
    const left = box.left + (box.width - picture.width * scale) / 2;
    const top = box.top + (box.height - picture.height * scale) / 2;
    const x = Math.floor((event.clientX - left) / scale);
    const y = Math.floor((event.clientY - top) / scale);
    const inside = x >= 0 && y >= 0 && x < picture.width && y < picture.height;
    const said = inside ? valueAt(x, y) : null;
    value.textContent = said || "\u00a0";
  };
  picture.onmouseleave = () => {
    value.textContent = "\u00a0";
  };
}

export function heatValueAt(indices, width) {
  // The heatmap's value at a pixel, from its colormap index (render.colormap_indices: the
  // index is trunc(value * 256), so the value is within 1/256 of index / 255).
  return (x, y) => {
    const index = indices[y * width + x];
    return index === undefined ? null : `heatmap ${(index / 255).toFixed(2)}`;
  };
}

export function gridValueAt(series, n) {
  // The channel of the tile under the pointer and its activation in that cell (the tiles laid
  // out as paint.js lays them: `gap` apart, `per_row` to a row, each cell `zoom` pixels).
  const perRow = series.per_row[n - 1];
  const tileH = series.rows * series.zoom;
  const tileW = series.columns * series.zoom;
  return (x, y) => {
    const row = Math.floor(y / (tileH + series.gap));
    const column = Math.floor(x / (tileW + series.gap));
    const inY = y - row * (tileH + series.gap);
    const inX = x - column * (tileW + series.gap);
    const t = row * perRow + column;
    if (column >= perRow || t >= n || inY >= tileH || inX >= tileW) return null;
    const cellY = Math.floor(inY / series.zoom);
    const cellX = Math.floor(inX / series.zoom);
    const activation = series.cells[t * series.size + cellY * series.columns + cellX];
    return `channel ${series.channels[t]} · ${activation.toFixed(2)} at cell (${cellY}, ${cellX})`;
  };
}

function leaveOnEscape() {
  // Esc presses the Present page's "Leave Present" button (on another page there is none), but
  // not while it closes something or edits a widget: an open select box's list, a text box
  // (the focus in a widget's input), the picture's full screen (the browser's own Esc).
  if (window.__hvLeaveOnEscape) return;
  window.__hvLeaveOnEscape = true;
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || event.defaultPrevented || document.fullscreenElement) return;
    const focused = document.activeElement;
    if (focused !== null && focused.closest(`${DOM.input}, textarea, ${DOM.listbox}`)) return;
    if (document.querySelector(DOM.listbox) !== null) return;
    byKey(LEAVE, "button")?.click();
  });
}
