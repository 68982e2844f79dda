// The notebook widget's view (hookviz/notebook/widget.py; anywidget calls `render` once per
// view of the widget): the CAM overlay with its colour bar, the layer's feature-map grid, the
// top-5 as class buttons, and the pickers and display options. The pictures are painted by the
// page's own code (paint.js) from what the kernel sends in the page's wire format (unpack.js):
// the image once (`_picture`), each result's heatmap as colormap indices (`_heat`) and each
// layer's feature maps (`_grid`). A display option is redrawn here at once, then synced to the
// kernel, which computes nothing for it; a layer, class or method goes to the kernel as a
// message (`{pick, value}`) and its answer comes back as new traits and data.
//
// The root carries what it shows in `data-layer`, `data-target`, `data-method` and, while a
// pick waits for the kernel, `data-busy`; each picture's figure its display options
// (`data-alpha`, `data-cmap`; the grid's `data-channels`, `data-order`, `data-scale`); each
// canvas counts its draws (paint.js). Tests wait for these.
import { canvasIn, paint, paintGrid, paintRamp, seriesOf } from "./paint.js";
import { baseOf, entryIn, provideBase, provideHeats, store } from "./store.js";
import { unpack } from "./unpack.js";

// the traits a display option is, and what each redraws
const OVERLAY_OPTIONS = ["opacity", "colormap"];
const GRID_OPTIONS = ["grid_colormap", "channels", "order", "scale"];
const ORDER_LABELS = { mean: "mean activation", max: "max activation", index: "index" };
const SCALE_LABELS = { channel: "per channel", shared: "shared" };

function bytesOf(value) {
  // a bytes trait as the widget manager hands it over (a DataView in JupyterLab and VS Code)
  if (value instanceof Uint8Array) return value;
  if (value instanceof DataView || ArrayBuffer.isView(value)) {
    return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  }
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  return null;
}

function payloadOf(model, name) {
  const bytes = bytesOf(model.get(name));
  return bytes !== null && bytes.length > 0 ? unpack(bytes) : null;
}

function make(tag, parent, attributes = {}, text = undefined) {
  const made = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) made.setAttribute(name, value);
  if (text !== undefined) made.textContent = text;
  if (parent) parent.appendChild(made);
  return made;
}

function labelled(parent, text, control) {
  const label = make("label", parent, {}, text);
  label.appendChild(control);
  return control;
}

function fillSelect(select, options, value) {
  // options: [value, text] pairs, or groups {label, options}; rebuilt only when they change
  const key = JSON.stringify(options);
  if (select.dataset.options !== key) {
    select.replaceChildren();
    for (const option of options) {
      if (Array.isArray(option)) {
        make("option", select, { value: option[0] }, option[1]);
        continue;
      }
      const group = make("optgroup", select, { label: option.label });
      for (const [name, text] of option.options) make("option", group, { value: name }, text);
    }
    select.dataset.options = key;
  }
  select.value = String(value);
}

class NotebookView {
  constructor(model, el) {
    this.model = model;
    this.listeners = [];
    this.heat = null; // the current result's data, and the store's entry of its indices
    this.heatEntry = null;
    this.grid = null; // the current layer's data, and its entry (the series by order)
    this.gridEntry = null;
    this.base = null; // the store's entry of the image's pixels
    this.shownOverlay = null; // what each canvas shows now (a want, below)
    this.shownGrid = null;
    this.root = make("div", el, { class: "hv-notebook", "data-testid": "hvNotebook" });
    this.build();
    this.listen();
    this.takePicture();
    this.takeGrid();
    this.takeHeat();
    this.syncControls();
  }

  // ---- the elements

  build() {
    const root = this.root;
    const picks = make("div", root, { class: "hv-row hv-picks" });
    this.layerBox = labelled(picks, "Layer", make("select", null, { class: "hv-layer" }));
    this.methodBox = labelled(picks, "Method", make("select", null, { class: "hv-method" }));
    this.classRow = make("div", root, { class: "hv-row hv-classes", role: "group" });
    this.classRow.setAttribute("aria-label", "top-5 classes");
    this.errorLine = make("div", root, { class: "hv-error", role: "alert" });
    const pictures = make("div", root, { class: "hv-row hv-pictures" });
    this.overlay = this.figure(pictures, "hv-overlay", "hvOverlay");
    this.bar = canvasIn(this.overlay.figure, "hv-bar", 256, 10);
    this.bar.setAttribute("aria-label", "colour bar, 0 (left) to 1 (right)");
    this.overlay.figure.appendChild(this.overlay.caption);
    this.gridView = this.figure(pictures, "hv-grid", "hvGrid");
    this.buildDisplay(make("div", root, { class: "hv-row hv-display" }));
    this.layerBox.addEventListener("change", () => this.pick("layer", this.layerBox.value));
    this.methodBox.addEventListener("change", () => this.pick("method", this.methodBox.value));
  }

  figure(parent, name, testId) {
    const figure = make("figure", parent, { class: `hv-picture ${name}`, "data-testid": testId });
    const title = make("div", figure, { class: "hv-title" });
    const canvas = canvasIn(figure, "hv-main");
    const caption = make("div", figure, { class: "hv-caption" });
    return { figure, title, canvas, caption };
  }

  buildDisplay(row) {
    // each control sets its trait here (the view redraws on the change) and syncs it
    const set = (name, value) => {
      this.model.set(name, value);
      this.model.save_changes();
    };
    const range = (attributes) => make("input", null, { type: "range", ...attributes });
    this.opacity = labelled(row, "Opacity", range({ min: 0, max: 1, step: 0.05 }));
    this.opacity.classList.add("hv-opacity");
    this.opacity.addEventListener("input", () => set("opacity", Number(this.opacity.value)));
    this.colormap = labelled(row, "Heatmap colormap", make("select", null, { class: "hv-cmap" }));
    this.colormap.addEventListener("change", () => set("colormap", this.colormap.value));
    this.channels = labelled(row, "Channels", range({ min: 1, step: 1, class: "hv-channels" }));
    this.channelCount = make("span", row, { class: "hv-channel-count" });
    this.channels.addEventListener("input", () => set("channels", Number(this.channels.value)));
    this.order = labelled(row, "Order", make("select", null, { class: "hv-order" }));
    this.order.addEventListener("change", () => set("order", this.order.value));
    this.scale = labelled(row, "Colour scale", make("select", null, { class: "hv-scale" }));
    this.scale.addEventListener("change", () => set("scale", this.scale.value));
    this.gridColormap = labelled(
      row,
      "Feature-map colormap",
      make("select", null, { class: "hv-grid-cmap" }),
    );
    this.gridColormap.addEventListener("change", () => set("grid_colormap", this.gridColormap.value));
  }

  // ---- the model

  on(event, callback) {
    this.model.on(event, callback);
    this.listeners.push([event, callback]);
  }

  listen() {
    const controls = () => this.syncControls();
    for (const name of ["layer", "target", "method", "classes", "layers", "methods", "error"]) {
      this.on(`change:${name}`, controls);
    }
    this.on("change:_replies", () => {
      delete this.root.dataset.busy;
      this.syncControls();
    });
    this.on("change:_picture", () => this.takePicture());
    this.on("change:_heat", () => this.takeHeat());
    this.on("change:_grid", () => this.takeGrid());
    for (const name of OVERLAY_OPTIONS) this.on(`change:${name}`, () => this.redraw());
    for (const name of GRID_OPTIONS) this.on(`change:${name}`, () => this.redraw());
  }

  remove() {
    for (const [event, callback] of this.listeners) this.model.off(event, callback);
    this.listeners = [];
  }

  pick(name, value) {
    // the kernel computes it; until it answers, the pictures are the last ones, faded
    this.root.dataset.busy = "true";
    this.model.send({ pick: name, value });
  }

  takePicture() {
    const data = payloadOf(this.model, "_picture");
    if (data === null) return;
    this.tables = data.tables;
    provideBase(data.digest, data.png);
    this.base = baseOf(data.digest);
    this.redraw();
  }

  takeHeat() {
    const data = payloadOf(this.model, "_heat");
    if (data === null) return;
    this.heat = data;
    this.heatEntry = entryIn(store.heats, data.id);
    provideHeats({ [data.id]: { packed: data.packed, width: data.width } }, () => this.redraw());
    this.redraw();
  }

  takeGrid() {
    const data = payloadOf(this.model, "_grid");
    if (data === null) return;
    this.grid = data;
    this.gridEntry = entryIn(store.heats, data.id);
    if (this.gridEntry.pixels === undefined) {
      this.gridEntry.pixels = seriesOf(data.grid);
      this.gridEntry.resolve(this.gridEntry.pixels);
    }
    this.redraw();
  }

  // ---- the controls, as the traits say

  syncControls() {
    const model = this.model;
    const root = this.root;
    const layers = model.get("layers") || [];
    fillSelect(this.layerBox, layers.map((name) => [name, name]), model.get("layer"));
    const groups = Object.entries(model.get("methods") || {}).map(([label, names]) => ({
      label,
      options: names.map((name) => [name, name]),
    }));
    fillSelect(this.methodBox, groups, model.get("method"));
    this.syncClasses();
    const colormaps = (model.get("colormaps") || []).map((name) => [name, name]);
    fillSelect(this.colormap, colormaps, model.get("colormap"));
    fillSelect(this.gridColormap, colormaps, model.get("grid_colormap"));
    const orders = (model.get("orders") || []).map((name) => [name, ORDER_LABELS[name] || name]);
    fillSelect(this.order, orders, model.get("order"));
    const scales = (model.get("scales") || []).map((name) => [name, SCALE_LABELS[name] || name]);
    fillSelect(this.scale, scales, model.get("scale"));
    this.opacity.value = String(model.get("opacity"));
    this.errorLine.textContent = model.get("error") || "";
    root.dataset.layer = model.get("layer");
    root.dataset.target = String(model.get("target"));
    root.dataset.method = model.get("method");
  }

  syncClasses() {
    const classes = this.model.get("classes") || [];
    const target = this.model.get("target");
    const key = JSON.stringify(classes);
    if (this.classRow.dataset.classes !== key) {
      this.classRow.replaceChildren();
      for (const { index, name, probability } of classes) {
        const text = `${name} · ${(100 * probability).toFixed(1)}%`;
        const button = make("button", this.classRow, { type: "button", class: "hv-class" }, text);
        button.dataset.index = String(index);
        button.addEventListener("click", () => this.pick("target", index));
      }
      this.classRow.dataset.classes = key;
    }
    for (const button of this.classRow.querySelectorAll("button")) {
      button.setAttribute("aria-pressed", String(button.dataset.index === String(target)));
    }
  }

  // ---- the pictures

  redraw() {
    if (this.tables === undefined) return;
    this.drawOverlay();
    this.drawGrid();
  }

  drawOverlay() {
    const heat = this.heat;
    if (heat === null || this.base === null) return;
    const alpha = Number(this.model.get("opacity"));
    const cmap = this.model.get("colormap");
    const want = { id: heat.id, alpha, cmap };
    const shown = this.shownOverlay;
    if (shown !== null && ["id", "alpha", "cmap"].every((name) => shown[name] === want[name])) {
      return;
    }
    const entry = this.heatEntry;
    const base = this.base;
    if (entry.pixels === undefined || base.pixels === undefined) {
      // (drawn once both are here, as wanted by then)
      Promise.all([entry.promise, base.promise]).then(() => this.redraw(), console.error);
      return;
    }
    const { canvas, figure, title, caption } = this.overlay;
    if (canvas.width !== heat.width) canvas.width = heat.width;
    if (canvas.height !== heat.height) canvas.height = heat.height;
    title.textContent = heat.title;
    caption.textContent = heat.caption;
    canvas.setAttribute("aria-label", heat.alt);
    paint(canvas, entry.pixels, base.pixels, this.tables[cmap], alpha);
    if (shown === null || shown.cmap !== cmap) paintRamp(this.bar, this.tables[cmap]);
    figure.dataset.alpha = String(alpha);
    figure.dataset.cmap = cmap;
    this.shownOverlay = want;
  }

  drawGrid() {
    const grid = this.grid;
    if (grid === null) return;
    const model = this.model;
    const series = this.gridEntry.pixels;
    const order = model.get("order") in series ? model.get("order") : Object.keys(series)[0];
    const most = series[order].channels.length;
    const channels = Math.max(1, Math.min(Number(model.get("channels")) || 1, most));
    const scale = model.get("scale");
    const cmap = model.get("grid_colormap");
    const want = { id: grid.id, order, channels, scale, cmap };
    this.channels.max = String(most);
    this.channels.value = String(channels);
    this.channelCount.textContent = `${channels} of ${grid.channels}`;
    const shown = this.shownGrid;
    const fields = ["id", "order", "channels", "scale", "cmap"];
    if (shown !== null && fields.every((name) => shown[name] === want[name])) return;
    const { canvas, figure, title, caption } = this.gridView;
    paintGrid(canvas, series[order], channels, scale, this.tables[cmap]);
    title.textContent = `Feature maps · ${grid.layer}`;
    caption.textContent = `${channels} of ${grid.channels} channels, by ${ORDER_LABELS[order]}`;
    canvas.setAttribute("aria-label", `feature maps of ${grid.layer}: ${caption.textContent}`);
    figure.dataset.channels = String(channels);
    figure.dataset.order = order;
    figure.dataset.scale = scale;
    figure.dataset.cmap = cmap;
    this.shownGrid = want;
  }
}

export default {
  render({ model, el }) {
    const view = new NotebookView(model, el);
    return () => view.remove();
  },
};
