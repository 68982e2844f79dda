// A picture the browser colours itself, following the display widgets: the CAM overlay (with
// its colour bar), the raw heatmap or the feature-map grid. It follows the sidebar's opacity,
// colormap, "channels shown", channel-order and colour-scale widgets as they change, so a
// display change shows at once, without waiting for a server run (which still follows, and
// keeps the address and the downloads current).
//
// Each picture's element has one PictureView, which keeps all that picture's state. What it
// shows comes from one of three sources, each a method: the server's own data (`ownData`), a
// kept record of another layer (`layerSwap`, layer_swap.js) or of another class
// (`classFollow`, class_follow.js); `chooseRecord` alone decides between them.
//
// Each picture's element carries what it shows in `data-alpha`, `data-cmap` and (a grid)
// `data-channels`, `data-scale`, `data-order`, and `data-layer` (the layer box's label of the
// layer it shows); its canvas counts its draws (paint.js): what tests and the page benchmark
// wait for.
import { classFollow, noteClassChoice } from "./class_follow.js";
import { plain, pressedOption, watchSidebar, widgetValue } from "./dom.js";
import { fadeElsewhere, unfade } from "./fade.js";
import { remember, swapFor } from "./layer_swap.js";
import { canvasIn, paint, paintGrid, paintRamp, seriesOf } from "./paint.js";
import { gridValueAt, heatValueAt, presentable } from "./projector.js";
import { baseOf, entryIn, store } from "./store.js";

// each picture's element -> its PictureView: Streamlit calls the component again with new data
// in the same element, and the view there takes it
const views = new WeakMap();

// what a picture on the canvas is drawn from: another `want` equal in these shows the same
const DRAWN_FROM = ["id", "alpha", "cmap", "channels", "scale", "order"];

function element(parent, className, testId, first = false) {
  let found = parent.querySelector(`.${className}`);
  if (found === null) {
    found = document.createElement("div");
    found.className = className;
    found.setAttribute("data-testid", testId);
    if (first) parent.prepend(found);
    else parent.appendChild(found);
  }
  return found;
}

export function mountPicture(parentElement, data) {
  // The component's call for a picture: its view (the element's, or a new one) takes `data`.
  // Returns what Streamlit calls when the element goes.
  const root = element(parentElement, "hv-picture", "hvPicture");
  let view = views.get(root);
  if (view === undefined) {
    view = new PictureView(root);
    views.set(root, view);
  }
  return view.mount(data);
}

class PictureView {
  constructor(root) {
    this.root = root;
    this.data = null; // the server's latest data for this picture
    this.heat = null; // the store's entry of that data's pixels
    this.mounts = 0; // how many data the server sent: a draw that waits is for the latest only
    this.shown = null; // the `want` on the canvas (what `wanted` returns)
    this.named = null; // the layer the layer box last named (kept while the box is open)
    this.moved = false; // the channel slider moved since the server's latest data
    this.valueAt = null; // (x, y) -> the text of the value under the pointer, for projector.js
    this.listening = false; // the document's listeners are on (from a mount to the element going)
    this.observer = null; // the sidebar's watcher
    this.redraw = () => this.show(this.wanted());
    this.onClick = (event) => this.clicked(event);
    this.onKey = (event) => this.noteClass(event);
  }

  // ---- the server's data, the element's parts, the listeners

  mount(data) {
    // The pixels: a grid's sent with it, a heatmap's in the element before the overlay, by id.
    this.heat = entryIn(store.heats, data.id);
    if (this.heat.pixels === undefined && data.grid) {
      this.heat.pixels = seriesOf(data.grid);
      this.heat.resolve(this.heat.pixels);
    }
    remember(data);
    store.mounted.set(data.role, data);
    this.data = data;
    this.mounts += 1;
    this.moved = false;
    this.layOut(data);
    this.redraw();
    this.listen();
    const mount = this.mounts;
    // Streamlit calls this only when the element goes (not before it calls the component again
    // with new data): a previous data's call leaves the listeners to the latest.
    return () => this.unmount(data, mount);
  }

  layOut(data) {
    // The element's parts this data needs: title, canvas, colour bar, captions.
    const root = this.root;
    this.title = data.title !== undefined ? element(root, "hv-title", "hvTitle", true) : null;
    this.picture = canvasIn(root, "hv-main", data.width, data.height);
    presentable(root, this.picture, (x, y) => (this.valueAt === null ? null : this.valueAt(x, y)));
    this.bar = data.bar ? canvasIn(root, "hv-bar", 256, 10) : null;
    if (this.bar !== null) this.bar.setAttribute("aria-label", "colour bar, 0 (left) to 1 (right)");
    this.captions = [...root.querySelectorAll(".hv-caption")];
    while (this.captions.length < (data.captions || []).length) {
      const caption = document.createElement("div");
      caption.className = "hv-caption";
      caption.setAttribute("data-testid", "hvCaption");
      root.appendChild(caption);
      this.captions.push(caption);
    }
  }

  listen() {
    // The display widgets live in the sidebar: follow their values as the user changes them.
    // The document's listeners go on once; the sidebar's watcher is aimed again at each data
    // (the sidebar found now), dropping what it saw before this data.
    if (this.observer !== null) this.observer.disconnect();
    this.observer = watchSidebar(this.redraw);
    if (this.listening) return;
    this.listening = true;
    document.addEventListener("click", this.onClick, true);
    document.addEventListener("keydown", this.onKey, true);
    document.addEventListener("hookviz:classes", this.redraw);
  }

  unmount(data, mount) {
    if (mount === this.mounts && this.listening) {
      this.listening = false;
      document.removeEventListener("click", this.onClick, true);
      document.removeEventListener("keydown", this.onKey, true);
      document.removeEventListener("hookviz:classes", this.redraw);
      this.observer.disconnect();
      this.observer = null;
    }
    // the element goes: it no longer needs a swap to cover it
    if (store.mounted.get(data.role) === data) store.mounted.delete(data.role);
  }

  noteClass(event) {
    noteClassChoice(event, this.data.follow.classes, this.redraw);
  }

  clicked(event) {
    this.noteClass(event);
    const data = this.data;
    const cmap = pressedOption(event, data.follow.cmap);
    const layer = data.swap ? pressedOption(event, data.swap.box) : null;
    if (cmap in data.tables) this.show({ ...this.wanted(), cmap });
    else if (layer !== null) this.show(this.wanted(layer));
    // A radio (the colour scale, the channel order) is checked by the click's default action,
    // after this listener, and changes no attribute the observer sees: look again in the next
    // task.
    else setTimeout(this.redraw, 0);
  }

  // ---- the sources of pictures, and the choice between them

  ownData() {
    // the server's latest data for this picture
    return this.data;
  }

  layerSwap(layer) {
    // Another layer's record of this picture, where the layer box names a layer other than
    // the server's whose pictures are all here (`swapFor`); else null. `layer` is a label the
    // user just pressed (else the box's value; while the box is open, the layer last named).
    const data = this.data;
    let named = layer || (data.swap ? widgetValue(data.swap.box) : null);
    if (named === undefined) named = this.named;
    else if (named) this.named = named;
    if (!named || plain(named) === plain(data.swap.label)) return null;
    const swap = swapFor(named);
    const record = swap === null ? undefined : swap.get(data.role);
    return record === undefined || record === data ? null : record;
  }

  classFollow() {
    // Another of the top-5 classes' record of this picture, where the radio names one sent
    // ahead (class_follow.js); else null.
    return classFollow(this.data);
  }

  chooseRecord(layer) {
    // The record to show. Precedence: a layer swap, then a class follow, then the server's own
    // data. A layer swap wins because the classes sent ahead are of the server's layer: a
    // class follow applies only while the picture shows that layer.
    return this.layerSwap(layer) || this.classFollow() || this.ownData();
  }

  // ---- what is wanted, and drawing it

  wanted(layer) {
    // What is wanted now: the chosen record, shown as the widgets in the page say (the user's
    // latest); while a select box is open, as shown; without the widget, as the server says.
    // (A grid's channel count is kept within its series: the slider may still be another
    // layer's for a moment.)
    const data = this.data;
    const shown = this.shown || { alpha: data.alpha, cmap: data.cmap };
    const alphaText = widgetValue(data.follow.alpha);
    const cmapText = widgetValue(data.follow.cmap);
    const alpha = parseFloat(alphaText);
    // the number of channels wished: the slider's, once moved from what the server showed;
    // until then the server's wish, which the slider of a smaller layer may not reach (it
    // shows as many as that layer has, and the next layer shows the wish again)
    const slider = parseInt(widgetValue(data.follow.channels), 10);
    if (slider >= 1 && slider !== data.channels) this.moved = true;
    const channels = this.moved ? slider : data.wished;
    const scale = data.scales ? data.scales[parseInt(widgetValue(data.follow.scale), 10)] : null;
    // an order this grid has (by activation or channel number); one by the class's channel
    // weights that it lacks waits for the server's grid
    const order = data.orderings
      ? data.orderings[parseInt(widgetValue(data.follow.order), 10)]
      : undefined;
    const record = this.chooseRecord(layer);
    const tables = data.tables;
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
  }

  fadeOthers(record) {
    // Another layer's (or class's) pictures: the texts elsewhere are still this layer's (this
    // class's); the server's own pictures: they are current (its run redraws them, before the
    // pictures of the results).
    const data = this.data;
    const follow = data.follow.classes;
    if (record.ofClass !== undefined) {
      fadeElsewhere([record.fade], `class ${record.ofClass}`);
    } else if (record !== data) {
      fadeElsewhere(data.swap.elsewhere, record.swap.label);
    } else {
      if (data.swap) unfade(data.swap.elsewhere);
      if (follow) unfade([follow.box, follow.radio]);
    }
  }

  show(want) {
    // Draw `want` at once when the indices (and the image) are here, else once they are, with
    // whatever is wanted by then.
    this.fadeOthers(want.record);
    const shown = this.shown;
    if (shown !== null && DRAWN_FROM.every((name) => shown[name] === want[name])) {
      this.label(want); // the same pixels: only the texts may be new (this data's, not a record's)
      this.shown = want;
      delete this.root.dataset.stale;
      return;
    }
    const entry = want.record === this.data ? this.heat : store.heats.get(want.id);
    const base = want.record.base ? baseOf(want.record.base) : null;
    if (entry.pixels !== undefined && (base === null || base.pixels !== undefined)) {
      this.draw(want, entry.pixels, base && base.pixels); // in this task
      return;
    }
    // Until then what is on screen is the last picture, with its texts: marked stale, as
    // Streamlit marks its own elements during a run (a large photo's image takes a moment to
    // decode; the new photo beside it is current).
    this.root.dataset.stale = "true";
    const mount = this.mounts;
    Promise.all([entry.promise, base && base.promise])
      .then(() => {
        // still this data's turn (the server sent none since): draw what is wanted by now
        if (this.mounts === mount) this.redraw();
      })
      .catch((error) => {
        delete this.root.dataset.stale;
        console.error("hookviz: could not draw the picture", error);
      });
  }

  label(want) {
    // the texts of the picture shown (a grid's name its number of channels as {n})
    const record = want.record;
    const named = (text) => text.replaceAll("{n}", String(want.channels));
    this.picture.setAttribute("aria-label", named(record.alt));
    if (this.title !== null) this.title.textContent = record.title || "";
    this.captions.forEach((caption, index) => {
      caption.textContent = named((record.captions || [])[index] || "");
    });
    if (record.swap) this.root.dataset.layer = plain(record.swap.label);
  }

  draw(want, pixels, base) {
    const record = want.record;
    const root = this.root;
    const tables = this.data.tables;
    this.label(want); // first: the texts are in place when the picture says it is drawn
    if (record.grid) {
      paintGrid(this.picture, pixels[want.order], want.channels, want.scale, tables[want.cmap]);
      this.valueAt = gridValueAt(pixels[want.order], want.channels);
      root.dataset.channels = String(want.channels);
      root.dataset.scale = want.scale;
      root.dataset.order = want.order;
    } else {
      if (this.picture.width !== record.width) this.picture.width = record.width;
      if (this.picture.height !== record.height) this.picture.height = record.height;
      paint(this.picture, pixels, base, tables[want.cmap], want.alpha);
      this.valueAt = heatValueAt(pixels, record.width);
    }
    if (this.bar !== null && root.dataset.cmap !== want.cmap) {
      paintRamp(this.bar, tables[want.cmap]);
    }
    this.shown = want;
    delete root.dataset.stale;
    root.dataset.alpha = String(want.alpha);
    root.dataset.cmap = want.cmap;
  }
}
