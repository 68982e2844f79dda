// The pictures component's entry (hookviz/app/browser/pictures.py): Streamlit calls it on every mount
// and whenever `data` changes, with the same parentElement. Each element's payload
// (hookviz/app/browser/wire.py) says what it carries in `kind`: the images the overlays blend over,
// heatmaps' indices, the top-5 classes sent ahead (all three hidden: nothing to draw), or a
// picture to draw. (What the whole tab keeps is tab.js's, another component's.)
import { keepClasses } from "./class_follow.js";
import { mountPicture } from "./picture.js";
import { provideBase, provideHeats } from "./store.js";
import { unpack } from "./unpack.js";

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
    default:
      throw new Error(`hookviz: a payload of unknown kind ${data.kind}`);
  }
}
