// A picture the browser colours itself, following the display widgets: the CAM overlay (with
// its colour bar), the raw heatmap or the feature-map grid. It follows the sidebar's opacity,
// colormap, "channels shown", channel-order and colour-scale widgets as they change, so a
// display change shows at once, without waiting for a server run (which still follows, and
// keeps the address and the downloads current). What it shows is this element's own data, or
// a kept record: another layer's (layers.js) or another class's (classes.js).
//
// Each picture's element carries what it shows in `data-alpha`, `data-cmap` and (a grid)
// `data-channels`, `data-scale`, `data-order`, and `data-layer` (the layer box's label of the
// layer it shows); its canvas counts its draws (paint.js): what tests and the page benchmark
// wait for.
import { classFollow, noteClassChoice } from "./classes.js";
import { plain, pressedOption, watchSidebar, widgetValue } from "./dom.js";
import { fadeElsewhere, unfade } from "./fade.js";
import { remember, swapFor } from "./layers.js";
import { canvasIn, paint, paintGrid, paintRamp, seriesOf } from "./paint.js";
import { gridValueAt, heatValueAt, presentable } from "./present.js";
import { baseOf, entryIn, store } from "./store.js";

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
  const tables = data.tables;
  // The pixels: a grid's sent with it, a heatmap's in the element before the overlay, by id.
  const heat = entryIn(store.heats, data.id);
  if (heat.pixels === undefined && data.grid) {
    heat.pixels = seriesOf(data.grid);
    heat.resolve(heat.pixels);
  }
  remember(data);
  store.mounted.set(data.role, data);

  const root = element(parentElement, "hv-picture", "hvPicture");
  const title = data.title !== undefined ? element(root, "hv-title", "hvTitle", true) : null;
  const picture = canvasIn(root, "hv-main", data.width, data.height);
  presentable(root, picture);
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
    !!a && ["id", "alpha", "cmap", "channels", "scale", "order"].every((k) => a[k] === b[k]);

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
      root.__hvValueAt = gridValueAt(pixels[want.order], want.channels);
      root.dataset.channels = String(want.channels);
      root.dataset.scale = want.scale;
      root.dataset.order = want.order;
    } else {
      if (picture.width !== record.width) picture.width = record.width;
      if (picture.height !== record.height) picture.height = record.height;
      paint(picture, pixels, base, tables[want.cmap], want.alpha);
      root.__hvValueAt = heatValueAt(pixels, record.width);
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
    const entry = want.record === data ? heat : store.heats.get(want.id);
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

  // Streamlit calls the returned cleanup only when the element goes, not before it calls the
  // component again with new data: the previous call's watchers are stopped here, or two
  // calls' watchers would redraw their own data in turn.
  if (root.__hvStop) root.__hvStop();
  const mount = {};
  root.__hvMount = mount;
  redraw();
  // The display widgets live in the sidebar: follow their values as the user changes them.
  const observer = watchSidebar(redraw);
  const classes = data.follow.classes;
  const noteClass = (event) => noteClassChoice(event, classes, redraw);
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
    if (store.mounted.get(data.role) === data) store.mounted.delete(data.role);
  };
}
