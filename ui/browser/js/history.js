// One history entry per page visit. On a switch to another page Streamlit pushes the page's
// address without its query (it keeps only the parameters bound to widgets), and the page's
// run then writes the view into the address: a second push, so every visit left two entries
// and the first Back went to the bare one, which shows the same view (the page ignores an
// address without the view's fields and writes the view back). So the push that follows a
// page switch's bare push, on that page, replaces it. Only then: a bare address the browser
// opened (a link to "/") is an entry of its own, and the first choice made there is another,
// so Back returns to it. Installed once per browser tab: the wrapper outlives the component
// (Streamlit's page switches keep the document). What it relies on of Streamlit's is listed
// as DOM.page_switch_push (ui/browser/streamlit_dom.py), checked on a real page.

export function keepOneEntryPerVisit() {
  if (window.__hookvizHistory) return;
  window.__hookvizHistory = true;
  const push = history.pushState.bind(history);
  let bareSwitchTo = null; // the path of a page switch's bare entry, until the next push
  window.addEventListener("popstate", () => {
    bareSwitchTo = null; // Back or Forward: the entry stood on is not the switch's
  });
  history.pushState = (state, unused, url) => {
    const next = url == null ? null : new URL(url, location.href);
    const switched = bareSwitchTo;
    bareSwitchTo = null;
    if (next && next.pathname === switched && location.pathname === switched &&
        !location.search && next.search) {
      return history.replaceState(state, unused, url);
    }
    if (next && next.pathname !== location.pathname && !next.search) {
      bareSwitchTo = next.pathname;
    }
    return push(state, unused, url);
  };
}
