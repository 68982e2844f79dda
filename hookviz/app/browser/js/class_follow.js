// A class sent ahead: the top-5 classes' heatmaps come with the page (a hidden element,
// hookviz/app/pages/explore/top_classes.py), with the overlay's texts of each class. A click on the
// top-5 radio shows that class's overlay and raw heatmap at once (the grid is the same for
// every class), the class box faded until the server's run names the class; not while
// something beside the pictures depends on the class (an open panel, the grid ordered by the
// class's channel weights, a warning under the heatmap). A class picked in the class box waits
// for the server's run of the pictures it changes.
import { keyClass, panelOpen, pressedOption, radioChoice, widgetValue } from "./dom.js";
import { keep, store } from "./store.js";

const RADIO_KEYS = ["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", " "]; // change a radio

export function keepClasses(classes) {
  // The classes' records sent ahead for a context, by the radio's option.
  const options = {};
  for (const record of Object.values(classes.options)) options[record.option] = record;
  keep(store.classSets, classes.context, options, 8);
}

export function classFollow(data) {
  // The record of this picture for the class the user last picked on the top-5 radio, when
  // that is another class than the one it shows and its picture was sent ahead; else null
  // (the page waits for the server).
  const follow = data.follow.classes;
  const choice = store.classChoice;
  if (!follow || !follow.ready || !choice || choice.radio !== follow.radio) return null;
  const picked = choice.option;
  if (picked === null || picked === follow.option || radioChoice(follow.radio) !== picked) {
    return null;
  }
  const options = store.classSets.get(follow.context);
  const option = options ? options[picked] : undefined;
  const entry = option ? store.heats.get(option.id) : undefined;
  if (!option || !option.ready || !entry || entry.pixels === undefined || panelOpen()) return null;
  const grid = store.mounted.get("grid");
  if (grid && grid.orderings) {
    const order = grid.orderings[parseInt(widgetValue(grid.follow.order), 10)];
    if (follow.unless_orders.includes(order)) return null;
  }
  const record = { ...data, id: option.id, ofClass: option.option, fade: follow.box };
  // the overlay's texts name the class; the heatmap's do not
  if (data.role === "overlay") {
    Object.assign(record, { title: option.title, alt: option.alt, captions: option.captions });
  }
  return record;
}

export function noteClassChoice(event, follow, redraw) {
  // A choice on the top-5 radio (a click, or the arrow keys): noted, then `redraw`. Anything
  // done in the class box forgets it: until the server's run redraws the radio, its last
  // button stays lit, which must not be taken for the user's choice.
  if (!follow || !(event.target instanceof Element)) return;
  const choosing = event.type === "click" || RADIO_KEYS.includes(event.key);
  if (choosing && event.target.closest(`.${keyClass(follow.radio)}`) !== null) {
    // (checked by the event's default action, after this listener: read in the next task)
    setTimeout(() => {
      store.classChoice = { radio: follow.radio, option: radioChoice(follow.radio) };
      redraw();
    }, 0);
  } else if (
    event.target.closest(`.${keyClass(follow.box)}`) !== null ||
    pressedOption(event, follow.box) !== null
  ) {
    store.classChoice = null;
  }
}
