// The tab component's entry (hookviz/app/browser/tab.py): what the whole browser tab keeps from its
// first page on, installed once per tab (Streamlit's page switches keep the document, so it
// outlives the component): one history entry per page visit, and the phone's sidebar closed
// after a choice. It draws nothing.
import { keepOneEntryPerVisit } from "./history.js";
import { closeSidebarAfterAChoice } from "./phone.js";

export default function () {
  keepOneEntryPerVisit();
  closeSidebarAfterAChoice();
  return () => {};
}
