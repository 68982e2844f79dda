// The component's entry: Streamlit calls it on every mount and whenever `data` changes, with
// the same parentElement. Each element's payload (ui/browser/wire.py) says what it carries in
// `kind`: the images the overlays blend over, heatmaps' indices, the top-5 classes sent
// ahead, what the whole tab keeps (one history entry per page visit, the phone's sidebar
// closed after a choice) (all four hidden: nothing to draw), or a picture to draw.
import { keepClasses } from "./classes.js";
import { keepOneEntryPerVisit } from "./history.js";
import { closeSidebarAfterAChoice } from "./phone.js";
import { mountPicture } from "./picture.js";
import { provideBase, provideHeats } from "./store.js";
import { unpack } from "./wire.js";

const NOTHING = () => {};

export default function (component) {
  const data = unpack(component.data);
  switch (data.kind) {
    case "sources":
      // sent once per image, from outside the results: a class change does not send it again
      for (const [digest, png] of Object.entries(data.sources)) provideBase(digest, png);
      return NOTHING;
    case "heats":
      // in an element of their own that changes only with the analysis (Streamlit then sends
      // them once)
      provideHeats(data.heats, NOTHING);
      return NOTHING;
    case "classes":
      keepClasses(data.classes);
      // A class picked while its pictures were on their way shows once they are unpacked (an
      // answer that arrives just before the press is still being unpacked at the press, and
      // nothing else would redraw until the server's run)
      provideHeats(data.heats, () => document.dispatchEvent(new CustomEvent("hookviz:classes")));
      return NOTHING;
    case "picture":
      return mountPicture(component.parentElement, data);
    case "tab":
      // what the whole tab keeps from its first page on (Streamlit's page switches keep the
      // document)
      keepOneEntryPerVisit();
      closeSidebarAfterAChoice();
      return NOTHING;
    default:
      throw new Error(`hookviz: a payload of unknown kind ${data.kind}`);
  }
}
