// One history entry per page visit. On a switch to another page Streamlit pushes the page's
// address without its query (it keeps only the parameters bound to widgets), and the page's
// run then writes the view into the address: a second push, so every visit left two entries
// and the first Back went to the bare one, which shows the same view (the page ignores an
// address without the view's fields and writes the view back). So the push that follows a
// page switch's bare push, on that page, replaces it. Only then: a bare address the browser
// opened (a link to "/") is an entry of its own, and the first choice made there is another,
// so Back returns to it. Installed once per browser tab: the wrapper outlives the component
// (Streamlit's page switches keep the document). What it relies on of Streamlit's is listed
// as DOM.page_switch_push (hookviz/app/browser/streamlit_dom.py), checked on a real page.
//
// The two pushes of a switch can also come the other way round (about one switch in three on
// a loaded machine): the new page's run writes its view before Streamlit has moved the
// address to the new page, so the view is pushed on the old page's path, then the switch
// pushes the new path with that same query. That second push replaces the first, which named
// the old page with the new page's view. It is told from a choice made on the old page by the
// page link clicked just before it (a link to a path of this app other than this one).

export function keepOneEntryPerVisit() {
  if (window.__hookvizHistory) return;
  window.__hookvizHistory = true;
  const push = history.pushState.bind(history);
  let bareSwitchTo = null; // the path of a page switch's bare entry, until the next push
  let linkClickedTo = null; // the path of a page link clicked, until its page's push
  let viewOnOldPath = false; // the new page's view was pushed on the old page's path
  window.addEventListener("popstate", () => {
    bareSwitchTo = null; // Back or Forward: the entry stood on is not the switch's
    linkClickedTo = null;
  });
  document.addEventListener("click", (event) => {
    const link = event.target.closest?.("a[href]");
    const to = link ? new URL(link.href, location.href) : null;
    if (to && to.origin === location.origin && to.pathname !== location.pathname) {
      linkClickedTo = to.pathname;
      viewOnOldPath = false;
    }
  }, true);
  history.pushState = (state, unused, url) => {
    const next = url == null ? null : new URL(url, location.href);
    if (linkClickedTo && next) {
      if (next.pathname === location.pathname && next.search) {
        viewOnOldPath = true; // (kept until the switch's push, which replaces it)
        return push(state, unused, url);
      }
      const viewFirst = next.pathname === linkClickedTo && viewOnOldPath &&
        next.search === location.search;
      linkClickedTo = null;
      viewOnOldPath = false;
      if (viewFirst) {
        bareSwitchTo = null;
        return history.replaceState(state, unused, url);
      }
    }
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
