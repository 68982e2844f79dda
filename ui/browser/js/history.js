// One history entry per page visit. On a switch to another page Streamlit pushes the page's
// address without its query (it keeps only the parameters bound to widgets), and the page's
// run then writes the view into the address: a second push, so every visit left two entries
// and the first Back went to the bare one, which shows the same view (the page ignores an
// address without the view's fields and writes the view back). A push to the same page while
// the address holds no query replaces that bare entry instead. Installed once per browser
// tab: the wrapper outlives the component (Streamlit's page switches keep the document).

export function keepOneEntryPerVisit() {
  if (window.__hookvizHistory) return;
  window.__hookvizHistory = true;
  const push = history.pushState.bind(history);
  history.pushState = (state, unused, url) => {
    const next = url == null ? null : new URL(url, location.href);
    if (next && next.pathname === location.pathname && !location.search && next.search) {
      return history.replaceState(state, unused, url);
    }
    return push(state, unused, url);
  };
}
