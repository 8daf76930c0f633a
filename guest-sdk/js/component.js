// The component's exports, for componentize-js (scripts/build-js.sh builds
// this module beside app.js and kcl.js): the app's `recordProcessor` and the
// `window` export that calls its `closeWindow`.
export { recordProcessor } from "./app.js";
export { windowExport as window } from "./kcl.js";
