// On a phone the sidebar slides over most of the page, and after a choice made in it the page
// that choice changed stayed hidden under it. A choice there (an option picked in a select
// box, a radio, a toggle or checkbox, a file chosen, a page of the navigation that narrow
// windows move into it) closes it, as its close button would; sliders and text boxes, which
// take several moves, leave it open. Installed once per tab.
// Streamlit's parts come from `DOM` (hookviz/app/browser/streamlit_dom.py).

const PHONE = "(max-width: 640px)";

export function closeSidebarAfterAChoice() {
  if (window.__hookvizPhone) return;
  window.__hookvizPhone = true;
  const narrow = window.matchMedia(PHONE);
  const close = () => {
    const button = document.querySelector(DOM.collapse_sidebar_button);
    if (button !== null) button.click();
  };
  // (after the click or change has reached Streamlit: the widget sends its value first)
  const soon = () => setTimeout(close, 150);
  const sidebarOpen = () => {
    const sidebar = document.querySelector(DOM.sidebar);
    return sidebar !== null && sidebar.getBoundingClientRect().x >= 0;
  };
  document.addEventListener("change", (event) => {
    const file = event.target.matches && event.target.matches(DOM.uploader_input);
    if (narrow.matches && file && event.target.closest(DOM.sidebar)) soon();
  }, true);
  document.addEventListener("click", (event) => {
    if (!narrow.matches || !sidebarOpen() || !event.target.closest) return;
    // an option of a select box (its list is drawn outside the sidebar, over the page), or a
    // radio, toggle or checkbox of the sidebar (the click lands on its label)
    const label = event.target.closest(DOM.choice_label);
    const ticked =
      label !== null && label.closest(DOM.sidebar) && label.querySelector(DOM.ticked_input);
    const page = event.target.closest(DOM.sidebar_nav_link);
    if (event.target.closest(DOM.option) || ticked || page) soon();
  }, true); // (capture: a widget may stop the click's propagation)
}
