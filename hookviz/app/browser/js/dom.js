// Reading Streamlit's page: the widgets the pictures follow, found by their keys. Every part
// of Streamlit's DOM used here comes from `DOM` (hookviz/app/browser/streamlit_dom.py, put before this
// module by hookviz/app/browser/bundle.py), which a contract test checks on a real page.
/* global DOM */

export function plain(text) {
  // a label as a select box and its options show it (runs of spaces folded)
  return String(text).replace(/\s+/g, " ").trim();
}

export function keyClass(key) {
  // Streamlit's class for a keyed element: st-key-<key>, with anything but letters, digits,
  // "_" and "-" made "-"
  return `${DOM.key_class}${key.trim().replaceAll(/[^a-zA-Z0-9_-]/g, "-")}`;
}

export function byKey(key, inner = "") {
  return document.querySelector(`.${keyClass(key)}${inner ? ` ${inner}` : ""}`);
}

export function radioChoice(key) {
  // The option checked in the radio with this key (its index, as text), or null when none is
  // (a class picked in the box outside the top-5) or there is no such radio.
  const checked = byKey(key, DOM.checked_radio);
  return checked === null ? null : checked.value;
}

export function widgetValue(key) {
  // The value of the sidebar widget with this key: a radio's option index (as text), a select
  // box's or slider's text; undefined while it is an open select box, whose text is then what
  // the user types to filter it, not a choice; null without such a widget.
  if (!key) return null;
  const checked = radioChoice(key);
  if (checked !== null) return checked;
  const input = byKey(key, DOM.input);
  if (input === null) return null;
  if (input.getAttribute(DOM.expanded) === "true") return undefined;
  return input.value;
}

export function pressedOption(event, key) {
  // The option of the select box with this key that a click landed on, if any: a picture
  // follows at the click itself, without waiting for the box to close and show the choice.
  const option = event.target instanceof Element ? event.target.closest(DOM.option) : null;
  if (!key || option === null) return null;
  const input = byKey(key, DOM.input);
  const list = option.closest(DOM.listbox);
  if (input === null || list === null || input.getAttribute(DOM.controls) !== list.id) {
    return null;
  }
  return option.textContent.trim();
}

export function panelOpen() {
  // An open expander in the main area ("What am I looking at?", the channels behind the
  // heatmap) shows texts of the picture on screen: another layer's or class's picture would
  // leave them behind.
  const selector = `${DOM.main} ${DOM.expander} ${DOM.open_details}`;
  return document.querySelector(selector) !== null;
}

export function watchSidebar(redraw) {
  // Call `redraw` whenever a widget of the sidebar may have changed its value. Returns the
  // observer (disconnect it when done).
  const watched = document.querySelector(DOM.sidebar) || document.body;
  const observer = new MutationObserver(redraw);
  observer.observe(watched, {
    subtree: true,
    childList: true,
    characterData: true,
    attributes: true,
    attributeFilter: ["value", DOM.expanded, DOM.value_text, DOM.tab_index],
  });
  return observer;
}
