// Texts elsewhere on the page that describe what a picture shows (the caption under the layer
// box, the other class widget): while the browser shows another layer's or class's picture
// ahead of the server, they still describe the last one, so they are faded until the server's
// run redraws them (or the pictures go back to the server's own).
import { byKey } from "./dom.js";

// a faded element -> what the pictures show instead (`shown`) and the watcher that unfades it
// once the server redraws it
const fades = new WeakMap();

export function fadeElsewhere(keys, shown) {
  // Fade the elements with these keys, once per `shown` (what the pictures show instead): an
  // element redrawn by the server meanwhile is current, and is not faded again for it.
  for (const key of keys || []) {
    const element = key ? byKey(key) : null;
    if (element === null || fades.get(element)?.shown === shown) continue;
    element.dataset.hvStale = "true";
    // (redrawn: current; the attribute goes, the fade stays noted, so it is faded once)
    const watcher = new MutationObserver(() => {
      delete element.dataset.hvStale;
      watcher.disconnect();
    });
    watcher.observe(element, { subtree: true, childList: true, characterData: true });
    fades.set(element, { shown, watcher });
  }
}

export function unfade(keys) {
  for (const key of keys || []) {
    const element = key ? byKey(key) : null;
    const fade = element === null ? undefined : fades.get(element);
    if (fade === undefined) continue;
    fade.watcher.disconnect();
    delete element.dataset.hvStale;
    fades.delete(element);
  }
}
