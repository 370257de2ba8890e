// Stylelint for the report page's style sheet, analysis/report/report.css (inlined into the
// HTML report). Run by .ci/run with stylelint and stylelint-config-standard installed into a
// temporary directory (--config-basedir points "extends" at it). The rules turned off here
// are layout and notation only: the sheet is written compactly, one rule per line.
"use strict";

module.exports = {
  extends: ["stylelint-config-standard"],
  rules: {
    "declaration-block-single-line-max-declarations": null,
    "rule-empty-line-before": null,
    "at-rule-empty-line-before": null,
    "color-hex-length": null,
    // "(max-width: 1100px)" rather than "(width <= 1100px)": older browsers read it too.
    "media-feature-range-notation": null,
    // Flags "thead th" after "th:first-child" though the two set different properties
    // (background, text-align); the rule compares selectors only, never properties.
    "no-descending-specificity": null,
  },
};
